/* LD_PRELOAD helper for scripts/gpu-v2-probe: on SIGSEGV print the native backtrace (each frame with its object and offset) to stderr. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void on_segv(int sig, siginfo_t *info, void *ctx) {
    void *frames[64];
    int n = backtrace(frames, 64);
    dprintf(2, "=== SIGSEGV at address %p, %d frames ===\n", info->si_addr, n);
    for (int i = 0; i < n; i++) {
        Dl_info d;
        if (dladdr(frames[i], &d) && d.dli_fname)
            dprintf(2, "#%d %s+0x%lx (%s)\n", i, d.dli_fname, (unsigned long)((char *)frames[i] - (char *)d.dli_fbase),
                    d.dli_sname ? d.dli_sname : "?");
        else
            dprintf(2, "#%d %p\n", i, frames[i]);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}
__attribute__((constructor)) static void install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
}
