"""Uploaded codes files: parsed as data only, every problem a clear message."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from omni_core import RequestError, codes_to_json, load_codes

GOOD = np.arange(5 * 16).reshape(5, 16) % 2048


def write(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, np.ndarray):
        np.save(path, content, allow_pickle=True)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def test_npy_and_json_round_trip(tmp_path):
    np.testing.assert_array_equal(load_codes(write(tmp_path, "a.npy", GOOD.astype(np.int16))), GOOD)
    np.testing.assert_array_equal(load_codes(write(tmp_path, "a.json", codes_to_json(GOOD))), GOOD)
    np.testing.assert_array_equal(load_codes(write(tmp_path, "b.json", json.dumps(GOOD.tolist()))), GOOD)
    assert load_codes(write(tmp_path, "c.npy", GOOD.astype(np.float32))).dtype == np.int64


BAD = [  # (file name, content, words the message must contain)
    ("wrong_shape.npy", np.zeros((5, 8), np.int64), "shape [5, 8]"),
    ("one_dim.npy", np.zeros(16, np.int64), "shape [16]"),
    ("empty.npy", np.zeros((0, 16), np.int64), "no frames"),
    ("too_big_code.npy", np.full((3, 16), 2048), "outside 0..2047"),
    ("negative.npy", np.full((3, 16), -1), "outside 0..2047"),
    ("nan.npy", np.full((3, 16), np.nan), "NaN"),
    ("fraction.npy", np.full((3, 16), 1.5), "fractional"),
    ("strings.npy", np.array([["a"] * 16]), "codes must be integers"),
    ("objects.npy", np.array([[object()] * 16], dtype=object), "never loaded"),
    ("pickle.npy", pickle.dumps({"evil": 1}), "never loaded"),
    ("garbage.npy", b"\x93NUMPY garbage", "not a readable .npy"),
    ("bad.json", "{not json", "not valid JSON"),
    ("ragged.json", json.dumps([[1, 2], [3]]), "list of 16 numbers"),
    ("dict.json", json.dumps({"frames": []}), "list of frames"),
    ("codes.txt", "1 2 3", "not a codes file"),
    ("too_many.npy", np.zeros((5000, 16), np.int64), "limit is 1500"),
]


@pytest.mark.parametrize("name,content,message", BAD, ids=[b[0] for b in BAD])
def test_bad_files_get_a_clear_message(tmp_path, name, content, message):
    with pytest.raises(RequestError, match=message.replace("[", r"\[").replace(".", r"\.")):
        load_codes(write(tmp_path, name, content))


def test_huge_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "huge.npy"
    path.write_bytes(b"\x93NUMPY" + b"\x00" * (6 * 1024 * 1024))
    with pytest.raises(RequestError, match="limited to 5 MB"):
        load_codes(path)
