"""The Gradio app. Only `omni_core`'s public names are used here; no torch.

cli.py        command-line flags (the model is chosen at launch, never from the page)
layout.py     every component, placed; ui.py wires them and holds the launch settings
handlers.py   Lab: generate (streaming), stop, redraw, listen, upload, the codes API
studio.py     Studio: after a take (statistics, spectrogram, inspector, A/B), code surgery, its APIs
recording.py  Recording: your own audio → codes, round trip, ablation, the encode API
take.py       one session's take (codes, audio, edits)
figures.py, charts.py, panels.py, inspector.py   the heatmap, the charts, the HTML panels
codestats.py, spectrum.py, roundtrip.py, surgery.py   plain-numpy statistics, spectrograms, measures, edits
files.py      WAV and codes downloads
"""
