//! Which data-transfer modes this process can use, and why not when it cannot: the poly-algorithm
//! of the Myrinet paper (seed 003) for shared memory. Per message the sender picks:
//!
//! - **inline copy** through the ring (a record holds up to 64 KiB by default): two copies, the
//!   lowest latency, for small messages;
//! - **pipelined copy**: messages larger than a record cut into fragments that the receiver
//!   copies out while the sender writes the next (the fallback for large messages);
//! - **single copy**: from `VOLLEY_SINGLE_COPY_THRESHOLD` bytes on, when both ranks can, the
//!   sender puts only a descriptor (address, length) in the ring and the receiver copies straight
//!   from the sender's memory with process_vm_readv; the sender's buffer stays pinned by the
//!   protocol until the receiver has copied it.

use crate::config::Config;

/// Why single copy is off ("unavailable: ..." or "disabled: ..."), or None when it is available.
pub fn single_copy_unavailable(cfg: &Config) -> Option<String> {
    if !cfg.single_copy {
        return Some("disabled: VOLLEY_SINGLE_COPY=off".into());
    }
    if cfg.simulate_single_copy_refusal {
        return Some(
            "unavailable: process_vm_readv refused: Operation not permitted (os error 1) \
             [simulated by VOLLEY_SIMULATE_SINGLE_COPY_REFUSAL]"
                .into(),
        );
    }
    match volley_sys::yama_ptrace_scope() {
        Some(3) => {
            return Some("unavailable: /proc/sys/kernel/yama/ptrace_scope = 3 (no process may read another's memory)".into())
        }
        Some(2) if !volley_sys::has_cap_sys_ptrace() => {
            return Some("unavailable: /proc/sys/kernel/yama/ptrace_scope = 2 (needs CAP_SYS_PTRACE)".into())
        }
        _ => {}
    }
    // Peers must be allowed to read us (Yama's scope 1 forbids it between siblings otherwise).
    if let Err(e) = volley_sys::allow_any_ptracer() {
        return Some(format!("unavailable: prctl(PR_SET_PTRACER) failed: {e}"));
    }
    // A seccomp filter (some containers) may forbid the call itself: try it on ourselves.
    let src = [7u8; 8];
    let mut dst = [0u8; 8];
    if let Err(e) = volley_sys::process_vm_read(std::process::id(), &mut dst, src.as_ptr() as u64) {
        return Some(format!("unavailable: process_vm_readv refused: {e}"));
    }
    if dst != src {
        return Some("unavailable: process_vm_readv returned wrong data".into());
    }
    None
}
