# shellcheck shell=bash
# Ansible managed
# DeepEP runtime environment for localhost: `. /opt/deepep/env.sh`.
# Sourcing it twice is harmless. IBGDA variables: left out (DeepEP V2 without its legacy kernels).
export EP_DISABLE_GIN='1'
export NCCL_NVLS_ENABLE='0'
export NVSHMEM_DISABLE_NVLS='1'
export TORCH_SYMM_MEM_DISABLE_MULTICAST='1'
if [ -w '/opt/deepep/jit-cache/cache' ] && [ -w '/opt/deepep/jit-cache/tmp' ]; then export EP_JIT_CACHE_DIR='/opt/deepep/jit-cache'; fi
case ":${LD_LIBRARY_PATH:-}:" in *:'/opt/deepep/gdrcopy/builds/9942c071b4fd9412/lib':*) ;; *) export LD_LIBRARY_PATH='/opt/deepep/gdrcopy/builds/9942c071b4fd9412/lib'"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
case ":${PYTHONPATH:-}:" in *:'/opt/deepep/deepep/current/src':*) ;; *) export PYTHONPATH='/opt/deepep/deepep/current/src'"${PYTHONPATH:+:$PYTHONPATH}" ;; esac
