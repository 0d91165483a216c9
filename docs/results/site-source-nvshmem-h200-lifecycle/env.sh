# shellcheck shell=bash
# Ansible managed
# DeepEP runtime environment for localhost: `. /opt/deepep/env.sh`.
# Sourcing it twice is harmless. IBGDA variables: left out (no RDMA port; KF36).
export NCCL_NVLS_ENABLE='0'
export NVSHMEM_DISABLE_NVLS='1'
export TORCH_SYMM_MEM_DISABLE_MULTICAST='1'
case ":${LD_LIBRARY_PATH:-}:" in *:'/opt/deepep/gdrcopy/builds/d4201e505e8af9b4/lib':*) ;; *) export LD_LIBRARY_PATH='/opt/deepep/gdrcopy/builds/d4201e505e8af9b4/lib'"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
case ":${LD_PRELOAD:-}:" in *:'/opt/deepep/nvshmem/builds/ea7c9f9a5321e047/lib/libnvshmem_host.so.3':*) ;; *) export LD_PRELOAD='/opt/deepep/nvshmem/builds/ea7c9f9a5321e047/lib/libnvshmem_host.so.3'"${LD_PRELOAD:+:$LD_PRELOAD}" ;; esac
case ":${PYTHONPATH:-}:" in *:'/opt/deepep/deepep/current/src':*) ;; *) export PYTHONPATH='/opt/deepep/deepep/current/src'"${PYTHONPATH:+:$PYTHONPATH}" ;; esac
