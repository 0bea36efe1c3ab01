#!/bin/sh
# Entry point of the SOLARIS image: `docker run solaris:cpu worker --agents embed` runs
# `solaris worker --agents embed`.
# A `gpu` image gets CUDA/cuDNN user-space libraries as NVIDIA's pip wheels (site-packages/nvidia/*/lib);
# put them on the loader path so onnxruntime-gpu finds them (the NVIDIA container runtime only
# mounts the driver). Nothing to do in a `cpu` image.
set -eu
for dir in /opt/venv/lib/python3.11/site-packages/nvidia/*/lib; do
  [ -d "$dir" ] && LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
exec solaris "$@"
