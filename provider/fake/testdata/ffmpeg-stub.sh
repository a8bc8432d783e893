#!/bin/sh
# Stands in for ffmpeg in hermetic tests: writes a marker to the output path,
# which the fake provider always passes as the last argument.
for a in "$@"; do out=$a; done
printf 'stub mp4\n' > "$out"
