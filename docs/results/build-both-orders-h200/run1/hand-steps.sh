# The hand steps (each timed by gpu-build-benchmark), in a shell with the venv activated and CUDA on PATH:
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH CUDA_HOME=/usr/local/cuda
gdrcopy() {  # GDRCopy README, "from source": the library (no driver source here; gdrdrv is the system layer's)
    cd /tmp/bench-hand/src/gdrcopy && make prefix=/opt/bench/hand/gdrcopy CUDA=/usr/local/cuda lib lib_install
}
nvshmem() {  # NVIDIA's NVSHMEM source build with IBGDA, as DeepEP's install notes give it; GPU arch 90
    cd /tmp/bench-hand/src/nvshmem && \
    NVSHMEM_IBGDA_SUPPORT=1 NVSHMEM_USE_GDRCOPY=1 GDRCOPY_HOME=/opt/bench/hand/gdrcopy NVSHMEM_SHMEM_SUPPORT=0 \
    NVSHMEM_UCX_SUPPORT=0 NVSHMEM_USE_NCCL=0 NVSHMEM_MPI_SUPPORT=0 NVSHMEM_PMIX_SUPPORT=0 \
    NVSHMEM_TIMEOUT_DEVICE_POLLING=0 NVSHMEM_BUILD_TESTS=0 NVSHMEM_BUILD_EXAMPLES=0 NVSHMEM_BUILD_PYTHON_LIB=0 \
    cmake -GNinja -S . -B build/ -DCMAKE_INSTALL_PREFIX=/opt/bench/hand/nvshmem \
        -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES=90 && \
    cmake --build build/ --target install
}
deepep() {  # DeepEP's install.sh (bdist_wheel, pip install) with its README's NVSHMEM_DIR and TORCH_CUDA_ARCH_LIST;
    # CUDA 13 moved cuda/std/tuple under include/cccl: the write-ups' fix for "cuda/std/tuple: No such file" (KF21)
    cd /tmp/bench-hand/src/DeepEP && \
    CPATH=/usr/local/cuda/include/cccl TORCH_CUDA_ARCH_LIST=9.0 NVSHMEM_DIR=/opt/bench/hand/nvshmem \
        python setup.py bdist_wheel && \
    python -m pip install --no-deps --force-reinstall dist/*.whl  # over the collection's wheel of the same version
}
env_script() {  # README "post-installation": the variables DeepEP's jobs need, in a file to source
    printf 'export NVSHMEM_DIR=%s\nexport LD_LIBRARY_PATH=%s/lib:$LD_LIBRARY_PATH\nexport PATH=%s/bin:$PATH\n' \
        /opt/bench/hand/nvshmem /opt/bench/hand/nvshmem /opt/bench/hand/nvshmem > /opt/bench/hand/env.sh
}
