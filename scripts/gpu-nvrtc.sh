# Sourced by the GPU scripts (gpu-check.sh, gpu-profile.sh), from the repository root:
# exports QUIVER_NVRTC as the CUDA toolkit's (or the NVRTC wheel's) library folder when it
# is not set and libnvrtc.so.13 is not already on the loader path.
if [ -z "${QUIVER_NVRTC:-}" ]; then
    for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
             /usr/lib/x86_64-linux-gnu .venv/lib/python3*/site-packages/nvidia/cu13/lib \
             /opt/*/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do
        if [ -e "$d/libnvrtc.so.13" ]; then
            QUIVER_NVRTC="$(cd "$d" && pwd)"
            export QUIVER_NVRTC
            break
        fi
    done
fi
