() => {
  // Omni Speech Lab page script: a click on the heatmap chooses that frame in the frame slider
  // (plotly clicks do not reach Python through gr.Plot), and a playhead follows the playing audio
  // across the heatmap and the spectrogram (they share one time axis).
  const FRAME_S = 0.08;
  const PLAYERS = "#audio audio, #audio-k audio, #audio-edit audio, #audio-a audio, #audio-b audio";
  const plot = (id) => document.querySelector(`#${id} .js-plotly-plot`);

  function setFrame(index) {
    const range = document.querySelector("#frame input[type=range]");
    const box = document.querySelector("#frame input[type=number]");
    if (!range || !box) return;
    const frame = Math.max(0, Math.min(index, Number(range.max)));
    for (const input of [range, box]) {
      input.value = String(frame);
      input.dispatchEvent(new Event("input", { bubbles: true }));
      input.dispatchEvent(new Event("change", { bubbles: true }));
    }
  }

  function hookClicks() {
    const gd = plot("heatmap");
    if (gd && gd.on && gd.__labHooked !== gd._fullData) {
      gd.__labHooked = gd._fullData;
      gd.removeAllListeners && gd.removeAllListeners("plotly_click");
      gd.on("plotly_click", (event) => {
        const point = event.points && event.points[0];
        if (point) setFrame(Math.floor(Number(point.x) / FRAME_S));
      });
    }
  }

  function drawPlayhead() {
    const playing = [...document.querySelectorAll(PLAYERS)].find((a) => !a.paused && !a.ended);
    for (const id of ["heatmap", "spectrogram"]) {
      const gd = plot(id);
      const layout = gd && gd._fullLayout;
      if (!layout || !layout.xaxis || !layout.yaxis) continue;
      const host = gd.parentElement;
      let line = host.querySelector(":scope > .lab-playhead");
      if (!line) {
        line = document.createElement("div");
        line.className = "lab-playhead";
        host.style.position = "relative";
        host.appendChild(line);
      }
      if (!playing) { line.style.display = "none"; continue; }
      const xa = layout.xaxis, ya = layout.yaxis;
      line.style.display = "block";
      line.style.left = `${gd.offsetLeft + xa._offset + xa.l2p(playing.currentTime)}px`;
      line.style.top = `${gd.offsetTop + ya._offset}px`;
      line.style.height = `${ya._length}px`;
      line.dataset.t = playing.currentTime.toFixed(3);
    }
  }

  function tick() {
    hookClicks();
    drawPlayhead();
    requestAnimationFrame(tick);
  }
  requestAnimationFrame(tick);
}
