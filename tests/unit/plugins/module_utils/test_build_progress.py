# -*- coding: utf-8 -*-
from __future__ import annotations

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_progress import build_phase, elapsed_text

# The head of an NVSHMEM build log as source_build writes it (each command after "$ "), cmake's progress lines.
NVSHMEM_LOG = """$ patch -p1 --forward < '/opt/deepep/nvshmem/patches/fix.patch'
patching file src/host/init.cu
# exit 0
$ cmake -S . -B build -DNVSHMEM_IBGDA_SUPPORT=1 -DNVSHMEM_MPI_SUPPORT=0 -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build -j16
-- The CXX compiler identification is GNU 13.3.0
[  2%] Building CXX object src/CMakeFiles/nvshmem_host.dir/host/bootstrap/bootstrap.cpp.o
[ 45%] Building CUDA object src/CMakeFiles/nvshmem_device.dir/device/init/init_device.cu.o
"""


def test_phase_is_the_step_and_the_last_progress_line():
    assert build_phase(NVSHMEM_LOG) == (
        "cmake -S . -B build -DNVSHMEM_IBGDA_SUPPORT=1 -DNVSHMEM_M...: "
        "[45%] Building CUDA object src/CMakeFiles/nvshmem_device.dir/device/init/init_device.cu.o")


def test_phase_of_a_ninja_build_and_of_a_new_step():
    ninja = "$ python setup.py build_ext --inplace\n[120/311] /usr/local/cuda/bin/nvcc -c csrc/kernels/intranode.cu\n"
    assert build_phase(ninja) == ("python setup.py build_ext --inplace: "
                                  "[120/311] /usr/local/cuda/bin/nvcc -c csrc/kernels/intranode.cu")
    # A progress line belongs to its step: the next step starts without one.
    assert build_phase(ninja + "# exit 0\n$ ls dist\n") == "ls dist"


def test_phase_before_the_first_step():
    assert build_phase("") == "starting" and build_phase(None) == "starting"


def test_phase_when_the_step_has_left_the_tail():
    # The tail of NCCL's make (no progress lines): the build goes on, it is not "starting".
    tail = ("Compiling  transport/net_ib.cc                > /opt/deepep/nccl/builds/82de/src/build/obj/transport/net_ib.o\n"
            "Compiling  device/all_reduce.cu               > /opt/deepep/nccl/builds/82de/src/build/obj/device/ar.o\n")
    assert build_phase(tail) == "... Compiling device/all_reduce.cu > /opt/deepep/nccl/builds/82de/src/build/obj/device/ar.o"


def test_elapsed_text():
    assert elapsed_text(42.4) == "42 s" and elapsed_text(65) == "1 min 05 s" and elapsed_text(600) == "10 min 00 s"
