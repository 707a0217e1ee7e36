"""The Base models' speaker encoder: a 24 kHz clip → an x-vector that fills the speaker slot.

    wav → log-mel (128 bins, n_fft 1024, hop 256, Hann 1024, slaney filters to 12 kHz,
          reflect-padded by (n_fft - hop) / 2 each side, not centred)           [B, T, 128]
    → ECAPA-TDNN: TDNN, 3 SE-Res2Net blocks, multi-layer aggregation, attentive
      statistics pooling, a 1×1 conv                                             [B, enc_dim]

The maths is the package's (`mel_spectrogram`, `Qwen3TTSSpeakerEncoder`); convolutions are
`padding="same"` with reflect padding, as there. The mel filterbank is librosa's slaney
filterbank, computed here with numpy as librosa computes it (float64, stored as float32).
Parameter names follow the checkpoint (`speaker_encoder.…`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from omni_core.models.qwen3_tts.config import SpeakerEncoderConfig

N_FFT, HOP, N_MELS, FMAX = 1024, 256, 128, 12000


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above (librosa, htk=False)."""
    hz = np.asanyarray(hz, dtype=np.float64)
    mels = hz / (200.0 / 3)
    log_region = hz >= 1000.0
    mels = np.where(log_region, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mels)
    return mels


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    mels = np.asanyarray(mels, dtype=np.float64)
    hz = (200.0 / 3) * mels
    return np.where(mels >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (mels - 15.0)), hz)


def mel_filters(sr: int = 24000, n_fft: int = N_FFT, n_mels: int = N_MELS, fmin: float = 0.0,
                fmax: float = FMAX) -> np.ndarray:
    """[n_mels, n_fft/2 + 1] float32, librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax) (slaney norm)."""
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    weights = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    for i in range(n_mels):
        weights[i] = np.maximum(0, np.minimum(-ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]))
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights


def log_mel(wav: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """wav [B, N] float32 → log-mel [B, frames, 128]."""
    pad = (N_FFT - HOP) // 2
    wav = F.pad(wav[:, None], (pad, pad), mode="reflect")[:, 0]
    spec = torch.stft(wav, N_FFT, hop_length=HOP, win_length=N_FFT, window=torch.hann_window(N_FFT, device=wav.device),
                      center=False, normalized=False, onesided=True, return_complex=True)
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    return torch.log(torch.clamp(torch.matmul(filters, magnitude), min=1e-5)).transpose(1, 2)


def _conv(cin: int, cout: int, kernel: int, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(cin, cout, kernel, dilation=dilation, padding="same", padding_mode="reflect")


class TDNNBlock(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, dilation: int):
        super().__init__()
        self.conv = _conv(cin, cout, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


class Res2NetBlock(nn.Module):
    """Channels split into `scale` parts; part i > 0 goes through a TDNN after adding part i-1's output."""

    def __init__(self, channels: int, scale: int, kernel: int, dilation: int):
        super().__init__()
        self.scale = scale
        self.blocks = nn.ModuleList(TDNNBlock(channels // scale, channels // scale, kernel, dilation)
                                    for _ in range(scale - 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = []
        for i, part in enumerate(torch.chunk(x, self.scale, dim=1)):
            if i >= 1:
                part = self.blocks[i - 1](part if i == 1 else part + out[-1])
            out.append(part)
        return torch.cat(out, dim=1)


class SEBlock(nn.Module):
    def __init__(self, channels: int, se_channels: int):
        super().__init__()
        self.conv1 = _conv(channels, se_channels, 1)
        self.conv2 = _conv(se_channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(self.conv2(F.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * s


class SERes2NetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, scale: int, se_channels: int, kernel: int, dilation: int):
        super().__init__()
        self.tdnn1 = TDNNBlock(cin, cout, 1, 1)
        self.res2net_block = Res2NetBlock(cout, scale, kernel, dilation)
        self.tdnn2 = TDNNBlock(cout, cout, 1, 1)
        self.se_block = SEBlock(cout, se_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x)))) + x


class AttentiveStatsPool(nn.Module):
    """Mean and std over time, weighted by an attention that sees each step and the global statistics."""

    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TDNNBlock(channels * 3, attention_channels, 1, 1)
        self.conv = _conv(attention_channels, channels, 1)

    @staticmethod
    def stats(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = (w * x).sum(2)
        std = torch.sqrt((w * (x - mean.unsqueeze(2)).pow(2)).sum(2).clamp(1e-12))
        return mean, std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] → [B, 2C, 1]."""
        T = x.shape[-1]
        uniform = torch.ones(x.shape[0], 1, T, dtype=x.dtype, device=x.device)
        mean, std = self.stats(x, uniform / uniform.sum(dim=2, keepdim=True))
        context = torch.cat([x, mean.unsqueeze(2).repeat(1, 1, T), std.unsqueeze(2).repeat(1, 1, T)], dim=1)
        attention = F.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = self.stats(x, attention)
        return torch.cat((mean, std), dim=1).unsqueeze(2)


class SpeakerEncoder(nn.Module):
    """speaker_encoder.*"""

    def __init__(self, cfg: SpeakerEncoderConfig):
        super().__init__()
        ch, k, d = cfg.enc_channels, cfg.enc_kernel_sizes, cfg.enc_dilations
        self.cfg = cfg
        self.blocks = nn.ModuleList([TDNNBlock(cfg.mel_dim, ch[0], k[0], d[0])] + [
            SERes2NetBlock(ch[i - 1], ch[i], cfg.enc_res2net_scale, cfg.enc_se_channels, k[i], d[i])
            for i in range(1, len(ch) - 1)])
        self.mfa = TDNNBlock(ch[-1], ch[-1], k[-1], d[-1])
        self.asp = AttentiveStatsPool(ch[-1], cfg.enc_attention_channels)
        self.fc = _conv(ch[-1] * 2, cfg.enc_dim, 1)
        self._filters: dict[torch.device, torch.Tensor] = {}

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        """mels [B, T, mel_dim] → x-vectors [B, enc_dim]."""
        h = mels.transpose(1, 2)
        outs = []
        for block in self.blocks:
            h = block(h)
            outs.append(h)
        h = self.mfa(torch.cat(outs[1:], dim=1))
        return self.fc(self.asp(h)).squeeze(-1)

    @torch.no_grad()
    def embed(self, wav: torch.Tensor) -> torch.Tensor:
        """wav [N] float32 at 24 kHz → the x-vector [enc_dim] (in the weights' dtype)."""
        device, dtype = self.fc.weight.device, self.fc.weight.dtype
        if device not in self._filters:
            self._filters[device] = torch.from_numpy(mel_filters(self.cfg.sample_rate)).to(device)
        mels = log_mel(wav.float().to(device)[None], self._filters[device])
        return self(mels.to(dtype))[0]


def min_samples() -> int:
    """The shortest clip the mel's reflect padding accepts (more than the padding on each side)."""
    return int(math.ceil((N_FFT - HOP) / 2)) + 1
