//! NUMA: which memory node a set of CPUs sits on (read from /sys), and where the pages of a
//! shared mapping go (mbind's shared policy) and are (move_pages).
//!
//! A policy set with `mbind` on a shared mapping of a memfd or tmpfs file belongs to the file
//! (the kernel's shared policy), not to the mapping: pages allocated later for that range, by
//! any process and by `posix_fallocate` too, follow it. volley sets it on a job segment's
//! rings before it reserves the segment's memory, so each ring's pages are allocated on its
//! receiver's node.

use crate::Mapping;
use std::io;
use std::path::Path;

/// `MPOL_PREFERRED` (linux/mempolicy.h): allocate on the node if it can, else elsewhere.
pub const MPOL_PREFERRED: i32 = 1;
/// `MPOL_F_ADDR` for get_mempolicy: the policy in force at an address.
const MPOL_F_ADDR: libc::c_ulong = 1 << 1;
/// Nodes a mask passed to the kernel can name (the kernel's own limit is at most this).
const MASK_NODES: usize = 1024;

/// Parses a kernel list such as "0-3,8,10-11".
fn parse_list(s: &str) -> Option<Vec<usize>> {
    let s = s.trim();
    if s.is_empty() {
        return Some(Vec::new());
    }
    let mut v = Vec::new();
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                v.extend(a..=b);
            }
            None => v.push(part.parse().ok()?),
        }
    }
    Some(v)
}

/// The memory nodes online (`/sys/devices/system/node/online`); `[0]` where the kernel has no
/// NUMA or the file cannot be read.
pub fn nodes_online() -> Vec<usize> {
    std::fs::read_to_string("/sys/devices/system/node/online")
        .ok()
        .and_then(|s| parse_list(&s))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![0])
}

/// The node of CPU `cpu`: the `nodeN` entry in its /sys directory.
fn node_of_cpu(root: &Path, cpu: usize) -> Option<usize> {
    std::fs::read_dir(root.join(format!("cpu{cpu}")))
        .ok()?
        .filter_map(|e| e.ok())
        .find_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse::<usize>()
                .ok()
        })
}

/// The node every CPU of `cpus` belongs to, or None if they span several nodes, the list is
/// empty or /sys does not say (a kernel without NUMA: every CPU then counts as node 0 only if
/// the machine has a single node online).
pub fn node_of_cpus(cpus: &[usize]) -> Option<usize> {
    node_of_cpus_in(Path::new("/sys/devices/system/cpu"), cpus, &nodes_online())
}

fn node_of_cpus_in(root: &Path, cpus: &[usize], online: &[usize]) -> Option<usize> {
    let mut node = None;
    for &c in cpus {
        let n = match node_of_cpu(root, c) {
            Some(n) => n,
            None if online.len() == 1 => online[0],
            None => return None,
        };
        match node {
            None => node = Some(n),
            Some(m) if m != n => return None,
            Some(_) => {}
        }
    }
    node
}

/// Sets the policy of `len` bytes of `map` from `offset` (both page-aligned) to prefer `node`:
/// pages allocated for that range from now on come from that node when it has memory free.
pub fn prefer_node(map: &Mapping, offset: usize, len: usize, node: usize) -> io::Result<()> {
    let page = page_size();
    if !offset.is_multiple_of(page)
        || !len.is_multiple_of(page)
        || offset.checked_add(len).is_none_or(|e| e > map.len())
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "range {offset}+{len} is not page-aligned inside the {}-byte mapping",
                map.len()
            ),
        ));
    }
    if node >= MASK_NODES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("node {node} is beyond the {MASK_NODES} nodes volley can name"),
        ));
    }
    let mut mask = [0 as libc::c_ulong; MASK_NODES / 64];
    mask[node / 64] |= 1 << (node % 64);
    // SAFETY: the range lies inside a live mapping we own (checked above); the mask holds
    // MASK_NODES bits (the kernel reads maxnode - 1 of them); mbind changes only where future
    // pages are allocated (no MPOL_MF_MOVE), never the memory's contents.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            map.as_ptr().add(offset),
            len as libc::c_ulong,
            MPOL_PREFERRED as libc::c_ulong,
            mask.as_ptr(),
            (MASK_NODES + 1) as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The policy in force at byte `offset` of `map`: its mode (0 default, 1 preferred, 2 bind, 3
/// interleave, ...) and the nodes it names.
pub fn policy_at(map: &Mapping, offset: usize) -> io::Result<(i32, Vec<usize>)> {
    if offset >= map.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut mode: libc::c_int = 0;
    let mut mask = [0 as libc::c_ulong; MASK_NODES / 64];
    // SAFETY: mode and mask are valid out-pointers of the sizes given; the address lies inside
    // a live mapping.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            (MASK_NODES + 1) as libc::c_ulong,
            map.as_ptr().add(offset),
            MPOL_F_ADDR,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let nodes = (0..MASK_NODES)
        .filter(|&n| mask[n / 64] & (1 << (n % 64)) != 0)
        .collect();
    Ok((mode, nodes))
}

/// The node the page holding byte `offset` of `map` is on, once this process has it mapped
/// (the caller reads it first); an error such as ENOENT if it is not.
pub fn page_node(map: &Mapping, offset: usize) -> io::Result<usize> {
    if offset >= map.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: inside the mapping.
    let page = unsafe { map.as_ptr().add(offset) } as *mut libc::c_void;
    let mut status: libc::c_int = -1;
    // SAFETY: one page address in, one status out; nodes NULL asks where pages are and moves
    // nothing.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0 as libc::c_int,
            1 as libc::c_ulong,
            &page as *const *mut libc::c_void,
            std::ptr::null::<libc::c_int>(),
            &mut status as *mut libc::c_int,
            0 as libc::c_int,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if status < 0 {
        return Err(io::Error::from_raw_os_error(-status));
    }
    Ok(status as usize)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lists_parse() {
        assert_eq!(parse_list("0"), Some(vec![0]));
        assert_eq!(parse_list("0-2,5,7-8\n"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_list(""), Some(vec![]));
        assert_eq!(parse_list("3-1"), None);
        assert_eq!(parse_list("x"), None);
    }

    #[test]
    fn cpus_on_one_node_name_it_and_a_set_across_nodes_names_none() {
        let root = std::env::temp_dir().join(format!("volley-numa-{}", std::process::id()));
        for (cpu, node) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
            std::fs::create_dir_all(root.join(format!("cpu{cpu}/node{node}"))).unwrap();
            std::fs::create_dir_all(root.join(format!("cpu{cpu}/topology"))).unwrap();
        }
        assert_eq!(node_of_cpus_in(&root, &[0, 1], &[0, 1]), Some(0));
        assert_eq!(node_of_cpus_in(&root, &[3], &[0, 1]), Some(1));
        assert_eq!(node_of_cpus_in(&root, &[1, 2], &[0, 1]), None);
        assert_eq!(node_of_cpus_in(&root, &[], &[0, 1]), None);
        // A CPU /sys says nothing about: node 0 only where there is one node.
        assert_eq!(node_of_cpus_in(&root, &[9], &[0]), Some(0));
        assert_eq!(node_of_cpus_in(&root, &[9], &[0, 1]), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_preferred_node_set_on_a_memfd_range_holds_for_pages_allocated_after() {
        let fd = crate::memfd_create("volley-numa-test").unwrap();
        let page = page_size();
        let map = Mapping::map_shared(std::os::fd::AsRawFd::as_raw_fd(&fd), 4 * page).unwrap();
        let node = nodes_online()[0];
        prefer_node(&map, page, 2 * page, node).unwrap();
        crate::fallocate(&fd, 4 * page as u64).unwrap();
        assert_eq!(policy_at(&map, page).unwrap(), (MPOL_PREFERRED, vec![node]));
        assert_eq!(
            policy_at(&map, 3 * page - 1).unwrap(),
            (MPOL_PREFERRED, vec![node])
        );
        assert_eq!(
            policy_at(&map, 0).unwrap().0,
            0,
            "outside the range: default"
        );
        assert_eq!(policy_at(&map, 3 * page).unwrap().0, 0);
        // SAFETY: inside the mapping; a read faults the (allocated) page in.
        let _ = unsafe { std::ptr::read_volatile(map.as_ptr().add(page)) };
        assert_eq!(page_node(&map, page).unwrap(), node);
        assert!(prefer_node(&map, 1, page, node).is_err(), "unaligned");
        assert!(
            prefer_node(&map, 0, 8 * page, node).is_err(),
            "beyond the mapping"
        );
    }
}
