#!/usr/bin/env bash
# Issue 37's GPU-machine check: NVDEC vs CPU decoding and 16-core CPU scaling (BENCHMARKS.md, "GPU machine: NVDEC
# vs CPU, 16-core scaling (issue 37)"). The machine has torch 2.11+cu130 but no torchcodec, no FFmpeg and no network,
# so everything travels in the git-excluded folder .devbundle/ (prepared by hand, see BENCHMARKS.md):
#   av-15.1.0-cp312.tar.xz      PyAV 15.1's wheel, unpacked: robostream's fallback decoder, and its bundled FFmpeg 7.1
#                               (built with nvdec/cuvid) is the FFmpeg torchcodec loads here
#   whl/torchcodec-0.11.1-*.whl torchcodec for torch 2.11 from PyPI: CPU-only (the CUDA wheels live on PyTorch's own
#                               index, which cannot be reached from where the bundle is made)
#   torchcodec-0.11-src.tar.xz  torchcodec's release/0.11 C++ sources: built here with ENABLE_CUDA=1 against the
#                               machine's torch, replacing the wheel's FFmpeg-7 libraries
#   ffmpeg7-headers.tar.xz      FFmpeg 7.1's headers (Debian trixie's libav*-dev) for that build
#   npp13.tar.xz                NPP's core and color-conversion libraries and headers (torchcodec 0.11 links them)
#   pylib/                      pytest and its pure-Python dependencies (the GPU tests of the suite)
#   data/h264, data/av1         `robostream synth` datasets (480x640, 3 cameras, 150-frame episodes)
# Run from the repository root:  OUT=/some/folder bash benchmarks/device_run.sh
# (DATA=folder: other datasets than the bundle's data/, e.g. .devbundle/data480 (480x640 H.264, 3 cameras))
# Every step is guarded: a failure is logged verbatim and the later steps still run.
set -u -o pipefail

BUNDLE=${BUNDLE:-.devbundle}
OUT=${OUT:-/tmp/device_out}
WORK=${WORK:-/tmp/devwork}
PYTHON=${PYTHON:-python3}
BUILD_TORCHCODEC=${BUILD_TORCHCODEC:-1}
ENABLE_CUDA=${ENABLE_CUDA:-1}  # 0: a CPU-only build (a dry run of the build where there is no CUDA)
JOBS=${JOBS:-$(nproc)}
TOTAL_S=${TOTAL_S:-380}  # the whole script's seconds: the measurements get what the set-up and the build leave
SITE=$WORK/site
FFMPEG=$WORK/ffmpeg
NPP=$WORK/npp
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK" "$SITE" "$FFMPEG/lib"
# cmake, ninja and pybind11 are pip packages of the machine's Python: their scripts sit beside its interpreter
PATH="$("$PYTHON" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
if [ -d /usr/local/cuda/bin ]; then export CUDA_HOME=/usr/local/cuda PATH="/usr/local/cuda/bin:$PATH"; fi

step() { echo "=== $1 ($(date +%T))"; }

step "environment"
{
    nvidia-smi || echo "nvidia-smi failed"
    echo "--- ldconfig -p | grep -i nvcuvid"
    ldconfig -p | grep -i nvcuvid || echo "(none in the ldconfig cache)"
    echo "--- libnvcuvid files"
    find /usr /opt /lib /lib64 -name 'libnvcuvid.so*' 2>/dev/null || true
    ls -la /usr/local/nvidia/lib64 2>/dev/null | grep -i "cuvid\|libcuda\.so" || echo "(no /usr/local/nvidia/lib64 match)"
    echo "--- NPP in the image"
    find /usr /opt /lib /lib64 -name 'libnppicc.so*' 2>/dev/null || true
    echo "--- tools"
    command -v cmake ninja make pkg-config nvcc
    nvcc --version | tail -2
    "$PYTHON" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda)'
    nproc
} 2>&1 | tee "$OUT/environment.txt"

step "unpack PyAV 15.1 and the torchcodec 0.11.1 CPU wheel into $SITE"
tar -xJf "$BUNDLE/av-15.1.0-cp312.tar.xz" -C "$SITE" || echo "FAILED: unpack PyAV"
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$BUNDLE"/whl/torchcodec-*.whl || echo "FAILED: install torchcodec wheel"

step "FFmpeg prefix: PyAV's libraries under the sonames torchcodec opens"
tar -xJf "$BUNDLE/ffmpeg7-headers.tar.xz" -C "$FFMPEG"
for lib in avutil avcodec avformat avdevice avfilter swscale swresample; do
    file=$(ls "$SITE"/av.libs/lib$lib-*.so.* | head -1)
    major=$(basename "$file" | sed -E 's/.*\.so\.([0-9]+).*/\1/')
    ln -sf "$file" "$FFMPEG/lib/lib$lib.so.$major"
    ln -sf "$file" "$FFMPEG/lib/lib$lib.so"
done
ls -la "$FFMPEG/lib"
strings "$SITE"/av.libs/libavcodec-*.so.* | grep -E '^(h264|hevc|av1)_(nvdec|cuvid)$' | sort | tr '\n' ' '; echo

# NPP: the image's CUDA toolkit's where it has one (seen: CUDA 13.0's), else the carried NPP 13.0.3
if [ -e /usr/local/cuda/lib64/libnppicc.so ]; then
    NPP_LIB=/usr/local/cuda/lib64 NPP_INCLUDE=/usr/local/cuda/include
else
    tar -xJf "$BUNDLE/npp13.tar.xz" -C "$WORK"
    NPP_LIB=$NPP/lib NPP_INCLUDE=$NPP/include
fi
echo "NPP: $NPP_LIB"
export LD_LIBRARY_PATH="$FFMPEG/lib:$SITE/av.libs:$NPP_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# the driver's folder, where libnvcuvid.so.1 (NVDEC) sits on such machines when the ldconfig cache lacks it
if [ -d /usr/local/nvidia/lib64 ]; then LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/usr/local/nvidia/lib64"; fi
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
export PYTHONPATH="$PWD:$SITE:$PWD/$BUNDLE/pylib${PYTHONPATH:+:$PYTHONPATH}"

if [ "$BUILD_TORCHCODEC" = 1 ]; then
    step "build torchcodec 0.11 with ENABLE_CUDA=$ENABLE_CUDA against this torch and FFmpeg 7.1"
    (
        set -e
        rm -rf "$WORK/tcsrc" "$WORK/tcbuild"
        mkdir -p "$WORK/tcsrc"
        tar -xJf "$BUNDLE/torchcodec-0.11-src.tar.xz" -C "$WORK/tcsrc"
        # no pkg-config FFmpeg here: name the prefix with torchcodec's own add_ffmpeg_target (its S3 build's helper)
        sed -i 's|add_ffmpeg_target_with_pkg_config(ffmpeg_major_version)|add_ffmpeg_target(7 "$ENV{TORCHCODEC_FFMPEG_PREFIX}")\n    set(ffmpeg_major_version 7)|' \
            "$WORK/tcsrc/src/torchcodec/_core/CMakeLists.txt"
        grep -n "add_ffmpeg_target(7" "$WORK/tcsrc/src/torchcodec/_core/CMakeLists.txt"
        generator=()
        if command -v ninja >/dev/null; then generator=(-G Ninja); fi
        TORCHCODEC_FFMPEG_PREFIX=$FFMPEG cmake -S "$WORK/tcsrc" -B "$WORK/tcbuild" "${generator[@]}" \
            -DCMAKE_BUILD_TYPE=Release \
            -DCMAKE_INSTALL_PREFIX="$WORK/tcinstall" \
            -DTorch_DIR="$("$PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch" \
            -Dpybind11_DIR="$("$PYTHON" -m pybind11 --cmakedir)" \
            -DPYTHON_VERSION="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')" \
            -DENABLE_CUDA="$ENABLE_CUDA" \
            -DTORCHCODEC_DISABLE_COMPILE_WARNING_AS_ERROR=ON \
            -DCUDA_nppi_LIBRARY="$NPP_LIB/libnppc.so" \
            -DCUDA_nppicc_LIBRARY="$NPP_LIB/libnppicc.so" \
            -DCMAKE_CXX_FLAGS="-I$NPP_INCLUDE"
        cmake --build "$WORK/tcbuild" -j "$JOBS"
        cmake --install "$WORK/tcbuild"
        mkdir -p "$WORK/cpu_wheel_libs"
        cp "$SITE"/torchcodec/libtorchcodec_*7.so "$WORK/cpu_wheel_libs/"
        cp "$WORK"/tcinstall/libtorchcodec_*7.so "$SITE/torchcodec/"
        ldd "$SITE/torchcodec/libtorchcodec_core7.so" | grep -E "npp|avcodec|not found" || true
    ) > "$OUT/build.txt" 2>&1 && echo "build OK" || { echo "FAILED: torchcodec CUDA build (tail of build.txt):"; tail -40 "$OUT/build.txt"; }
fi

export PYTHONFAULTHANDLER=1  # a segfault prints the Python stack that led to it
step "smoke tests, one process each (rc 139: segfault)"
h264_file=$(ls "$BUNDLE"/data/h264/videos/*/chunk-000/file-000.mp4 | head -1)
decode="from torchcodec.decoders import VideoDecoder as V, set_cuda_backend as B"
smoke() {
    echo "--- $1"
    timeout 60 "$PYTHON" -c "$2" 2>&1 | tail -25
    echo "rc=${PIPESTATUS[0]}"
}
smoke "import av alone" "import av; print(av.__version__)"
smoke "import torch, then av" "import torch, av; print(av.__version__)"
smoke "import torch, then torchcodec" "import torch, torchcodec.decoders; print(torchcodec.__version__)"
if [ "$(tail -1 <<<"$(smoke x 'import torch, torchcodec.decoders' 2>&1)")" != "rc=0" ] && [ -d "$WORK/cpu_wheel_libs" ]; then
    echo "torchcodec's CUDA build does not import: the CPU wheel's FFmpeg-7 libraries back in place"
    cp "$WORK"/cpu_wheel_libs/*.so "$SITE/torchcodec/"
    smoke "import torch, then torchcodec (CPU wheel)" "import torch, torchcodec.decoders; print(torchcodec.__version__)"
fi
if [ "${SMOKE_DECODE:-1}" = 1 ]; then  # 0: skip (their answers are in BENCHMARKS.md; ~40 s of device time)
    smoke "decode on cpu" "import torch; $decode; print(V('$h264_file').get_frame_at(0).data.shape)"
    smoke "decode on cuda (ffmpeg)" "import torch; $decode; print(V('$h264_file', device='cuda').get_frame_at(0).data.device)"
    smoke "decode on cuda (beta)" "import torch; $decode
with B('beta'): d = V('$h264_file', device='cuda')
print(d.get_frame_at(0).data.device, d.cpu_fallback)"
fi

step "measurements, one process per group"
# scaling before the loaders: the loaders' cuda runs can take their whole time limit
for group in ${RUN_GROUPS:-cuda av1 av1_ffmpeg av1_robostream raw scaling loaders pyav more_loaders environment}; do
    "$PYTHON" benchmarks/device_decode.py --bundle "$BUNDLE" --data "${DATA:-$BUNDLE/data}" --out "$OUT" --group $group \
        --budget_s $((TOTAL_S - SECONDS - 10)) || echo "FAILED: group $group exited $?"
done
step "done"
