#!/bin/sh
# Stands in for an ffmpeg that cannot encode.
echo "stub: encoder not found" >&2
exit 1
