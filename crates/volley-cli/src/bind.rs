//! Where `volley run` binds its ranks: one core each by default (as `mpirun --bind-to core`
//! does), in an order read from the machine's topology (/sys/devices/system/cpu).
//!
//! The order for `core`: physical cores grouped by package and by shared last-level cache,
//! one CPU (hardware thread) of each core first, ranks filling one cache domain's cores before
//! the next ("packed", Open MPI's map-by-core): ranks i and i+1, which talk most in rings,
//! halos and ping-pongs, share a cache. The second hardware threads of the cores come only after
//! every core has a rank. More ranks than CPUs wrap around. `socket` binds each rank to every CPU
//! of one package, ranks dealt round-robin over the packages. Only CPUs this process may use
//! (its affinity mask: taskset, a cgroup's cpuset, Slurm's allocation) are used.

use clap::ValueEnum;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Default)]
pub enum BindTo {
    /// No binding: the kernel places and moves the ranks.
    None,
    /// Each rank to one core (hardware thread), packed in topology order.
    #[default]
    Core,
    /// Each rank to all the CPUs of one package (socket), round-robin over the packages.
    Socket,
}

impl BindTo {
    pub fn name(self) -> &'static str {
        match self {
            BindTo::None => "none",
            BindTo::Core => "core",
            BindTo::Socket => "socket",
        }
    }
}

/// One CPU as /sys describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cpu {
    id: usize,
    package: usize,
    /// The lowest CPU sharing its last-level cache (the domain's name); the package if unknown.
    llc: usize,
    core: usize,
}

/// The allowed CPUs and where they sit.
#[derive(Clone, Debug)]
pub struct Topology {
    cpus: Vec<Cpu>,
}

fn read_num(p: &Path) -> Option<usize> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// The first CPU of a list such as "0-3,8-11".
fn first_of_list(s: &str) -> Option<usize> {
    s.trim()
        .split([',', '-'])
        .next()
        .and_then(|x| x.parse().ok())
}

impl Topology {
    /// The topology of the CPUs this process may use; a CPU whose files are missing counts as
    /// a core of its own in package 0.
    pub fn read() -> Topology {
        Topology::read_from(
            Path::new("/sys/devices/system/cpu"),
            &volley_sys::allowed_cpus(),
        )
    }

    fn read_from(root: &Path, allowed: &[usize]) -> Topology {
        let cpus = allowed
            .iter()
            .map(|&id| {
                let d = root.join(format!("cpu{id}"));
                let package = read_num(&d.join("topology/physical_package_id")).unwrap_or(0);
                let core = read_num(&d.join("topology/core_id")).unwrap_or(id);
                // The last cache level listed is the one the most CPUs share.
                let llc = (0..8)
                    .rev()
                    .find_map(|i| {
                        std::fs::read_to_string(d.join(format!("cache/index{i}/shared_cpu_list")))
                            .ok()
                            .and_then(|s| first_of_list(&s))
                    })
                    .unwrap_or(usize::MAX - package);
                Cpu {
                    id,
                    package,
                    llc,
                    core,
                }
            })
            .collect();
        Topology { cpus }
    }

    /// The CPUs in the order `core` binding hands them out (see the module's comment).
    pub fn core_order(&self) -> Vec<usize> {
        // Physical cores, keyed by (package, cache domain, core), each with its CPUs in order.
        let mut cores: BTreeMap<(usize, usize, usize), Vec<usize>> = BTreeMap::new();
        for c in &self.cpus {
            cores
                .entry((c.package, c.llc, c.core))
                .or_default()
                .push(c.id);
        }
        let mut cores: Vec<Vec<usize>> = cores.into_values().collect();
        for c in &mut cores {
            c.sort_unstable();
        }
        let depth = cores.iter().map(Vec::len).max().unwrap_or(0);
        (0..depth)
            .flat_map(|t| cores.iter().filter_map(move |c| c.get(t).copied()))
            .collect()
    }

    /// The allowed CPUs of each package, packages in order.
    pub fn packages(&self) -> Vec<Vec<usize>> {
        let mut p: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for c in &self.cpus {
            p.entry(c.package).or_default().push(c.id);
        }
        p.into_values().collect()
    }
}

/// Which CPUs each rank gets.
#[derive(Clone, Debug)]
pub enum Plan {
    Unbound,
    /// Rank i gets set `i % len`.
    Sets(Vec<Vec<usize>>),
}

impl Plan {
    /// The plan for `--cpus LIST` if given (rank i on the i-th CPU of the list, round-robin),
    /// else for `--bind-to`.
    pub fn new(cpus: Option<&str>, bind: BindTo) -> Result<Plan, String> {
        if let Some(list) = cpus {
            let l = crate::run::parse_cpus(list)?;
            return Ok(Plan::Sets(l.into_iter().map(|c| vec![c]).collect()));
        }
        let t = Topology::read();
        Ok(match bind {
            BindTo::None => Plan::Unbound,
            BindTo::Core => Plan::Sets(t.core_order().into_iter().map(|c| vec![c]).collect()),
            BindTo::Socket => Plan::Sets(t.packages()),
        })
    }

    /// The CPUs of the rank `i`th in the order (None: unbound).
    pub fn for_rank(&self, i: usize) -> Option<Vec<usize>> {
        match self {
            Plan::Unbound => None,
            Plan::Sets(s) if s.is_empty() => None,
            Plan::Sets(s) => Some(s[i % s.len()].clone()),
        }
    }

    /// The NUMA node of each of `n` local ranks (local rank `l` is `order(l)`th in the plan),
    /// where its CPUs lie on one; an unbound rank runs where this process may, which may be one
    /// node too (numactl, a cpuset).
    pub fn homes(&self, n: usize, order: impl Fn(usize) -> usize) -> Vec<Option<usize>> {
        (0..n)
            .map(|l| {
                let cpus = self
                    .for_rank(order(l))
                    .unwrap_or_else(volley_sys::allowed_cpus);
                volley_sys::numa::node_of_cpus(&cpus)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory removed on drop.
    struct TmpDir(std::path::PathBuf);

    impl TmpDir {
        fn new(name: &str) -> TmpDir {
            let p = std::env::temp_dir().join(format!("volley-bind-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            TmpDir(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TmpDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A fake /sys: two packages of two cores of two threads each, one L3 per package; CPU
    /// numbering as Linux gives it on many Intel machines (the siblings come last).
    fn fake_sys() -> TmpDir {
        let d = TmpDir::new("sys");
        for id in 0..8usize {
            // Core ids repeat across packages, as Linux numbers them per package.
            let (package, core) = ((id / 2) % 2, id % 2);
            let c = d.path().join(format!("cpu{id}"));
            std::fs::create_dir_all(c.join("topology")).unwrap();
            std::fs::create_dir_all(c.join("cache/index3")).unwrap();
            std::fs::write(
                c.join("topology/physical_package_id"),
                format!("{package}\n"),
            )
            .unwrap();
            std::fs::write(c.join("topology/core_id"), format!("{core}\n")).unwrap();
            let l3 = if package == 0 { "0-1,4-5" } else { "2-3,6-7" };
            std::fs::write(c.join("cache/index3/shared_cpu_list"), l3).unwrap();
        }
        d
    }

    #[test]
    fn cores_are_packed_by_cache_domain_with_siblings_last() {
        let d = fake_sys();
        let all: Vec<usize> = (0..8).collect();
        let t = Topology::read_from(d.path(), &all);
        // Package 0's cores are CPUs {0,4} and {1,5}; package 1's {2,6} and {3,7}.
        assert_eq!(t.core_order(), vec![0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(t.packages(), vec![vec![0, 1, 4, 5], vec![2, 3, 6, 7]]);
        // Only the CPUs the process may use.
        let t = Topology::read_from(d.path(), &[1, 2, 5, 6]);
        assert_eq!(t.core_order(), vec![1, 2, 5, 6]);
    }

    #[test]
    fn missing_topology_files_give_one_core_per_cpu() {
        let d = TmpDir::new("empty");
        let t = Topology::read_from(d.path(), &[3, 1, 2]);
        assert_eq!(t.core_order(), vec![1, 2, 3]);
        assert_eq!(t.packages(), vec![vec![3, 1, 2]]);
    }

    #[test]
    fn ranks_wrap_around_the_plan() {
        let p = Plan::Sets(vec![vec![4], vec![5]]);
        assert_eq!(p.for_rank(0), Some(vec![4]));
        assert_eq!(p.for_rank(3), Some(vec![5]));
        assert_eq!(Plan::Unbound.for_rank(0), None);
    }
}
