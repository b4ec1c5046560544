//! Test hosts: network namespaces joined by veth pairs (a bridge for more than two), addresses
//! in 198.18.0.0/15 only, removed on drop (also when the test fails). Needs root and iproute2.

use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub fn sh(args: &[&str]) -> Result<(), String> {
    let o = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{args:?}: {e}"))?;
    if !o.status.success() {
        return Err(format!("{args:?}: {}", String::from_utf8_lossy(&o.stderr)));
    }
    Ok(())
}

/// Test hosts: namespaces named vt<pid>_<k>_<i>, removed on drop.
pub struct Hosts {
    pub names: Vec<String>,
    bridge: Option<String>,
    pub addrs: Vec<String>,
}

impl Hosts {
    pub fn new(n: usize, mtu: u32) -> Hosts {
        Hosts::with_bridge(n, mtu, n > 2)
    }

    /// `n` hosts on a bridge (any `n`; `new` joins two with a bare veth pair).
    pub fn bridged(n: usize, mtu: u32) -> Hosts {
        Hosts::with_bridge(n, mtu, true)
    }

    fn with_bridge(n: usize, mtu: u32, bridge: bool) -> Hosts {
        let k = NEXT.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}{k}", std::process::id() % 10000);
        let mut h = Hosts {
            names: Vec::new(),
            bridge: None,
            addrs: Vec::new(),
        };
        let subnet = 1 + (std::process::id() % 50) * 4 + k % 4;
        let r = (|| -> Result<(), String> {
            if bridge {
                let br = format!("vb{tag}");
                sh(&["ip", "link", "add", &br, "type", "bridge"])?;
                sh(&["ip", "link", "set", &br, "mtu", &mtu.to_string(), "up"])?;
                h.bridge = Some(br);
            }
            for i in 0..n {
                let ns = format!("vt{tag}h{i}");
                sh(&["ip", "netns", "add", &ns])?;
                h.names.push(ns.clone());
                sh(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
                let addr = format!("198.18.{subnet}.{}", i + 1);
                h.addrs.push(addr.clone());
                let inner = format!("vi{tag}h{i}");
                if let Some(br) = &h.bridge {
                    let outer = format!("vo{tag}h{i}");
                    sh(&[
                        "ip", "link", "add", &outer, "type", "veth", "peer", "name", &inner,
                        "netns", &ns,
                    ])?;
                    sh(&[
                        "ip",
                        "link",
                        "set",
                        &outer,
                        "mtu",
                        &mtu.to_string(),
                        "master",
                        br,
                        "up",
                    ])?;
                } else if i == 1 {
                    let other = format!("vi{tag}h0");
                    sh(&[
                        "ip",
                        "link",
                        "add",
                        &other,
                        "netns",
                        &h.names[0],
                        "type",
                        "veth",
                        "peer",
                        "name",
                        &inner,
                        "netns",
                        &ns,
                    ])?;
                    sh(&[
                        "ip",
                        "-n",
                        &h.names[0],
                        "addr",
                        "add",
                        &format!("{}/24", h.addrs[0]),
                        "dev",
                        &other,
                    ])?;
                    sh(&[
                        "ip",
                        "-n",
                        &h.names[0],
                        "link",
                        "set",
                        &other,
                        "mtu",
                        &mtu.to_string(),
                        "up",
                    ])?;
                } else {
                    continue;
                }
                sh(&[
                    "ip",
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("{addr}/24"),
                    "dev",
                    &inner,
                ])?;
                sh(&[
                    "ip",
                    "-n",
                    &ns,
                    "link",
                    "set",
                    &inner,
                    "mtu",
                    &mtu.to_string(),
                    "up",
                ])?;
            }
            Ok(())
        })();
        if let Err(e) = r {
            drop(h);
            panic!("cannot make test hosts (root and iproute2 needed): {e}");
        }
        h
    }

    pub fn list(&self) -> String {
        self.names.join(",")
    }

    /// Drops `pct`% of the frames arriving at every host, in the kernel (nftables: volley's
    /// EtherType and UDP alike): at each host's ingress, or, with a bridge, in the bridge (where
    /// frames an XDP program takes before ingress are dropped too).
    pub fn kernel_loss(&self, pct: u32) {
        if let Some(br) = &self.bridge {
            let tag = &br[2..];
            let rules = format!(
                "table bridge volley_loss_{tag} {{\n chain drops {{\n  type filter hook forward priority 0;\n  iifname \"vo{tag}h*\" numgen random mod 100 < {pct} drop\n }}\n}}\n"
            );
            nft(None, &rules);
            return;
        }
        for (i, ns) in self.names.iter().enumerate() {
            let dev = format!("vi{}h{i}", &ns[2..ns.rfind('h').unwrap()]);
            let rules = format!(
                "table netdev volley_loss {{\n chain rx {{\n  type filter hook ingress device \"{dev}\" priority 0;\n  numgen random mod 100 < {pct} drop\n }}\n}}\n"
            );
            nft(Some(ns), &rules);
        }
    }

    pub fn run(&self, n: usize, env: &[(&str, &str)], args: &[&str]) -> Output {
        self.command(n, env, args).output().expect("start volley")
    }

    /// `run` with options of `volley run` itself (`opts`, e.g. `--keep-going`) before `-n`.
    pub fn run_with(&self, opts: &[&str], n: usize, env: &[(&str, &str)], args: &[&str]) -> Output {
        self.command_with(opts, n, env, args)
            .output()
            .expect("start volley")
    }

    /// The `volley run` of `run`, not started (for a test that starts it in the background).
    pub fn command(&self, n: usize, env: &[(&str, &str)], args: &[&str]) -> Command {
        self.command_with(&[], n, env, args)
    }

    fn command_with(
        &self,
        opts: &[&str],
        n: usize,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Command {
        let (np, hosts) = (n.to_string(), self.list());
        let mut full = opts.to_vec();
        full.extend_from_slice(&[
            "-n",
            &np,
            "--hosts",
            &hosts,
            "--launch",
            "ip netns exec {host}",
            "--tag-output",
        ]);
        full.extend_from_slice(args);
        super::volley_command(&full, env)
    }
}

/// Loads nftables `rules` in namespace `ns` (None: this one).
fn nft(ns: Option<&str>, rules: &str) {
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "nft", "-f", "-"]);
            c
        }
        None => {
            let mut c = Command::new("nft");
            c.args(["-f", "-"]);
            c
        }
    };
    let o = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(rules.as_bytes())?;
            c.wait_with_output()
        })
        .expect("run nft (package nftables)");
    assert!(
        o.status.success(),
        "nft: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
        if let Some(b) = &self.bridge {
            let _ = sh(&["ip", "link", "del", b]);
            let _ = sh(&[
                "nft",
                "delete",
                "table",
                "bridge",
                &format!("volley_loss_{}", &b[2..]),
            ]);
        }
    }
}
