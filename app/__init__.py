"""The Gradio app. `ui` builds the page and wires it; `handlers` maps pipeline events to
component values; `take` is one session's state; `figures`, `panels` and `files` make
the heatmap, the HTML panels and the downloads. Only `omni_core`'s public names are used
here; no torch.
"""
