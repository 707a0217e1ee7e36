"""The speech API beside the page (issue 45), on one real `python app.py` server (tiny-tts, CPU).

BENCHMARKS.md, "The speech API".

  z1  first audio: the same request, streamed through the API (pcm, stream=true: the first body bytes)
      and through the page's streaming `synthesize` (gradio_client: the first update carrying audio),
      alternated, ROUNDS each; medians and the API's lead (goal: the API within 50 ms of the page).
  z2  16 API clients (codes format) and 4 page users (synthesize, its codes download) at once: every one
      served, none refused, each take equal to its solo run (batch invariance).

    .venv/bin/python -m benchmarks.api          (writes bench_results/api.json)
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

ROUNDS = 7
FRAMES = 48
API_CLIENTS, PAGE_USERS = 16, 4
TEXT = "The lab speaks to other tools now."


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def api_first_audio(url: str, text: str) -> float:
    """Seconds from the POST to the first audio bytes of a streamed pcm answer (read to its end)."""
    start = time.perf_counter()
    first = None
    with httpx.stream("POST", f"{url}v1/audio/speech", timeout=120, json=dict(
            input=text, voice="ryan", response_format="pcm", stream=True, max_new_tokens=FRAMES)) as answer:
        answer.raise_for_status()
        for chunk in answer.iter_raw():
            if chunk and first is None:
                first = time.perf_counter() - start
    return first


def page_job(client, text: str):
    return client.submit(text=text, mode="speak", speaker="ryan", predictor="kv", cuda_graph=False,
                         do_sample=False, temperature=0.9, top_k=50, top_p=1.0, seed=0, max_frames=FRAMES,
                         view="codes", api_name="/synthesize")


def page_first_audio(client, text: str) -> float:
    """Seconds from submitting the page's Generate to its first update carrying audio (read to the end)."""
    start = time.perf_counter()
    first = None
    for audio, *_ in page_job(client, text):
        if first is None and isinstance(audio, str) and audio:
            first = time.perf_counter() - start
    return first


def page_codes(client, text: str) -> list:
    outputs = list(page_job(client, text))
    files = outputs[-1][3]
    return np.load(next(p for p in files if p.endswith(".npy")), allow_pickle=False).tolist()


def api_codes(url: str, text: str) -> tuple[int, list | None]:
    answer = httpx.post(f"{url}v1/audio/speech", timeout=300, json=dict(
        input=text, voice="ryan", response_format="codes", max_new_tokens=FRAMES))
    return answer.status_code, answer.json().get("codes") if answer.status_code == 200 else None


def first_audio(url: str) -> dict:
    from gradio_client import Client

    client = Client(url, verbose=False)
    api_first_audio(url, TEXT), page_first_audio(client, TEXT)  # warm both paths
    api, page = [], []
    for _ in range(ROUNDS):
        api.append(api_first_audio(url, TEXT))
        page.append(page_first_audio(client, TEXT))
    api_ms, page_ms = 1000 * statistics.median(api), 1000 * statistics.median(page)
    return dict(rounds=ROUNDS, frames=FRAMES, api_first_audio_ms=api_ms, page_first_audio_ms=page_ms,
                api_minus_page_ms=api_ms - page_ms, goal_met=api_ms - page_ms <= 50.0)


def together(url: str) -> dict:
    from gradio_client import Client

    api_texts = [f"API client number {i} asks for speech." for i in range(API_CLIENTS)]
    page_texts = [f"Page user number {i} presses Generate." for i in range(PAGE_USERS)]
    solo_api = [api_codes(url, t)[1] for t in api_texts]
    solo_page = [page_codes(Client(url, verbose=False), t) for t in page_texts]
    clients = [Client(url, verbose=False) for _ in page_texts]
    start = time.perf_counter()
    with ThreadPoolExecutor(API_CLIENTS + PAGE_USERS) as pool:
        api = [pool.submit(api_codes, url, t) for t in api_texts]
        page = [pool.submit(page_codes, c, t) for c, t in zip(clients, page_texts)]
        api, page = [f.result() for f in api], [f.result() for f in page]
    wall = time.perf_counter() - start
    refused = sum(status != 200 for status, _ in api)
    return dict(api_clients=API_CLIENTS, page_users=PAGE_USERS, frames_each=FRAMES, wall_s=wall,
                served=sum(status == 200 for status, _ in api) + len(page), refused=refused,
                api_equal_to_solo=sum(codes == solo for (_, codes), solo in zip(api, solo_api)),
                page_equal_to_solo=sum(codes == solo for codes, solo in zip(page, solo_page)),
                frames_per_s=(API_CLIENTS + PAGE_USERS) * FRAMES / wall)


def main(json_path: str = "bench_results/api.json") -> dict:
    from tests.conftest import launch_app

    results: dict = {"machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "platform": platform.platform()}}
    with tempfile.TemporaryDirectory() as logs, launch_app(Path(logs), OMNI_MODEL="tiny-tts") as url:
        results["z1_first_audio"] = first_audio(url)
        results["z2_api_and_page_together"] = together(url)
    print(f"machine: {results['machine']['cpu']} ({results['machine']['cores']} cores)")
    for section in ("z1_first_audio", "z2_api_and_page_together"):
        print(section)
        for name, value in results[section].items():
            print(f"  {name:<24} {value:10.1f}" if isinstance(value, float) else f"  {name:<24} {value!s:>10}")
    Path(json_path).parent.mkdir(parents=True, exist_ok=True)
    Path(json_path).write_text(json.dumps(results, indent=2))
    print(f"wrote {json_path}")
    return results


if __name__ == "__main__":
    main()
