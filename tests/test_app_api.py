"""The app's two API endpoints, through gradio_client against the real `python app.py` server.

`codes`: non-streaming, returns {"codes", "text", "stats"} and a WAV. `synthesize`: the
streaming event the Generate button runs. Bad input gets a clear message and the
server keeps working.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from gradio_client import Client
from gradio_client.exceptions import AppError
from gradio_client.utils import Status

from .conftest import launch_app

FRAMES = 12


@pytest.fixture(scope="module")
def client(app_server) -> Client:
    return Client(app_server, verbose=False)


def synthesize(client: Client, text: str, predictor: str = "reprefill", max_frames: int = FRAMES, **kw):
    """Submit the streaming endpoint with the page's defaults; returns the job."""
    args = dict(text=text, mode="speak", speaker="ethan", predictor=predictor, cuda_graph=False, do_sample=False,
                temperature=0.9, top_k=50, top_p=1.0, seed=0, max_frames=max_frames, view="codes")
    args.update(kw)
    return client.submit(**args, api_name="/synthesize")


def test_codes_returns_codes_and_a_24khz_wav(client):
    result, wav = client.predict("Hello there", max_frames=FRAMES, api_name="/codes")
    codes = np.array(result["codes"])
    assert codes.ndim == 2 and codes.shape[1] == 16 and 1 <= len(codes) <= FRAMES
    assert codes.dtype.kind == "i" and codes.min() >= 0 and codes.max() <= 2047
    assert result["text"] == "Hello there"
    assert result["stats"]["frames"] == len(codes) and result["stats"]["predictor"] == "reprefill"
    audio, sample_rate = sf.read(wav)
    assert sample_rate == 24000
    assert abs(len(audio) - len(codes) * 1920) <= 1920  # 80 ms per frame


def test_synthesize_streams_audio_and_heatmap_updates(client):
    job = synthesize(client, "Streaming, frame by frame.", predictor="kv", max_frames=24)
    outputs = list(job)  # every yield, in order, as the page receives it
    assert job.status().code == Status.FINISHED
    live, final = outputs[:-1], outputs[-1]
    audio_chunks = sum(isinstance(audio, str) and audio != "" for audio, *_ in live)
    heatmaps = sum(isinstance(plot, dict) and bool(plot.get("plot")) for _, plot, *_ in live)
    assert audio_chunks >= 3, f"only {audio_chunks} audio updates before the end"
    assert heatmaps >= 3, f"only {heatmaps} heatmap updates before the end"
    _, plot, stats, files = final
    assert "24 frames" in json.loads(plot["plot"])["layout"]["title"]["text"]
    assert "KV cache" in stats
    assert sorted(p.rsplit(".", 1)[-1] for p in files) == ["json", "npy", "wav"]


def test_both_endpoints_and_both_predictors_give_the_same_codes(client):
    result, _ = client.predict("Same codes either way.", predictor="kv", max_frames=FRAMES, api_name="/codes")
    outputs = list(synthesize(client, "Same codes either way.", predictor="reprefill"))
    files = outputs[-1][3]
    streamed = np.load(next(p for p in files if p.endswith(".npy")), allow_pickle=False)
    np.testing.assert_array_equal(streamed, np.array(result["codes"]))


BAD_INPUTS = [  # (arguments to `codes`, what the message must say)
    (dict(text=""), "text is empty"),
    (dict(text="   \n\t "), "text is empty"),
    (dict(text="hi", predictor="turbo"), "unknown predictor"),
    (dict(text="hi", mode="sing"), "unknown mode"),
    (dict(text="hi", speaker="nobody"), "unknown speaker"),
    (dict(text="hi", max_frames=-3), "max_frames"),
    (dict(text="hi", seed=-1), "seed"),
]


@pytest.mark.parametrize("kwargs, message", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_gets_a_clear_error(client, kwargs, message):
    with pytest.raises(AppError, match=message):
        client.predict(**kwargs, api_name="/codes")


def test_bad_streaming_request_gets_a_clear_error_and_the_server_still_works(client):
    job = synthesize(client, "  ")
    with pytest.raises(AppError, match="text is empty"):
        job.result()
    result, _ = client.predict("Still here.", max_frames=4, api_name="/codes")
    assert len(result["codes"]) == 4


def test_16_users_at_once_each_get_exactly_their_solo_codes(client, app_server):
    """16 separate sessions submit at once: every request completes (none lost) and each equals
    its run alone, whatever the engine batched it with."""
    requests = [dict(text=f"Request number {i}.", do_sample=i % 2 == 1, seed=i, max_frames=6 + i % 5,
                     predictor=("reprefill", "kv", "compare")[i % 3], mode=("speak", "chat")[i % 4 == 3])
                for i in range(16)]
    solo = [client.predict(**r, api_name="/codes")[0] for r in requests]

    def run(r):  # one client per thread: separate sessions, as separate browsers would be
        return Client(app_server, verbose=False).predict(**r, api_name="/codes")[0]

    with ThreadPoolExecutor(len(requests)) as pool:
        together = list(pool.map(run, requests))
    assert [r["codes"] for r in together] == [r["codes"] for r in solo]
    assert solo[0]["codes"] != solo[2]["codes"]
    assert max(r["stats"]["batch_max"] for r in together) >= 8, "the engine never batched the users together"


def test_listeners_streaming_the_same_take_at_once_each_get_all_of_it(app_server):
    """Four sessions stream the same greedy take at once (the page's default text on a shared Space): each
    stream finishes with every chunk. Chunks handed to Gradio as (rate, samples) went through one file
    per chunk content, which identical chunks wrote and read at the same moment: ffmpeg got half a file
    ("Invalid data found") and that listener's stream failed (files.wav_bytes)."""

    def listen(_):
        job = synthesize(Client(app_server, verbose=False), "The same take for everyone.", predictor="kv",
                         max_frames=48)
        outputs = list(job)
        assert job.status().code == Status.FINISHED and job.status().success, job.status()
        chunks = sum(isinstance(audio, str) and audio != "" for audio, *_ in outputs[:-1])
        return chunks, np.load(next(p for p in outputs[-1][3] if p.endswith(".npy")), allow_pickle=False)

    with ThreadPoolExecutor(4) as pool:
        heard = list(pool.map(listen, range(4)))
    for chunks, codes in heard:
        assert chunks >= 3 and codes.shape == (48, 16)
        np.testing.assert_array_equal(codes, heard[0][1])


@pytest.mark.parametrize("path", ["/etc/passwd", str(Path(__file__).resolve().parent.parent / "app.py")])
def test_the_server_does_not_serve_arbitrary_files(app_server, path):
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{app_server}gradio_api/file={path}", timeout=10)
    assert refused.value.code in (403, 404)


def _server_pid(url: str) -> int:
    """The pid of the `python app.py --port N` serving `url`."""
    port = url.rstrip("/").rsplit(":", 1)[1]
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"app.py" in b" ".join(args) and b"--port" in args and args[args.index(b"--port") + 1] == port.encode():
            return int(proc.name)
    raise LookupError(f"no app.py serving {url}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_idle_server_leaves_the_cores_to_the_engine(client, app_server):
    """Between requests the server sleeps: under 5% of a core over 4 s. Gradio's queue polls every millisecond by
    default, which kept it at 7-8.5% of a core (app/ui.py, QUEUE_POLL_S), idle and while a request runs alike."""
    client.predict("Warm.", max_frames=2, api_name="/codes")
    stat = Path(f"/proc/{_server_pid(app_server)}/stat")

    def cpu_s() -> float:  # user + system time (/proc counts clock ticks), in seconds
        return sum(int(v) for v in stat.read_text().rsplit(")", 1)[1].split()[11:13]) / os.sysconf("SC_CLK_TCK")

    time.sleep(1)  # the request's last work done
    used, start = cpu_s(), time.perf_counter()
    time.sleep(4)
    share = (cpu_s() - used) / (time.perf_counter() - start)
    assert share < 0.05, f"an idle server used {share:.1%} of a core"


def test_without_ffmpeg_the_audio_comes_whole_at_the_end_with_a_note(tmp_path):
    """Gradio needs ffmpeg to stream audio; without it the app says so and sends one WAV."""
    no_ffmpeg = os.path.dirname(sys.executable)  # PATH with the venv's tools only
    with launch_app(tmp_path, PATH=no_ffmpeg) as url:
        client = Client(url, verbose=False)
        assert "ffmpeg is not installed" in json.dumps(client.config)
        outputs = list(synthesize(client, "No ffmpeg here.", max_frames=8))
        live_audio = [audio for audio, *_ in outputs[:-1] if isinstance(audio, str)]
        final_audio = outputs[-1][0]
        assert live_audio == []
        audio, sample_rate = sf.read(final_audio)
        assert sample_rate == 24000 and len(audio) > 0


def test_a_broken_checkpoint_stops_the_app_with_a_message_naming_the_file(tmp_path):
    """Start-up faults are reported with the file named, not a stack trace from inside torch."""
    import shutil
    import subprocess
    import sys

    from omni_core.synthetic.tiny import ensure_tiny

    broken = tmp_path / "ckpt"
    shutil.copytree(ensure_tiny("tiny"), broken)
    (broken / "tokenizer.json").unlink()
    done = subprocess.run([sys.executable, "app.py", "--model", str(broken), "--port", "0"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "tokenizer.json" in done.stderr and "Traceback" not in done.stderr


def test_starts_as_a_newcomer_starts_it(tmp_path):
    """Default environment (Gradio's analytics on, which compares themes at launch): the page serves."""
    from .conftest import launch_app

    with launch_app(tmp_path, GRADIO_ANALYTICS_ENABLED="True") as url:
        with urllib.request.urlopen(url, timeout=30) as page:
            assert page.status == 200 and b"Omni Speech Lab" in page.read()
