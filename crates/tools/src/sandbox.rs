//! The `bash` sandbox: a Landlock ruleset every `bash` process runs under.
//!
//! # What is confined
//! - [`SandboxMode::WorkspaceWrite`] (the default): every file may be read and executed; files
//!   may be created, written, truncated, renamed or removed only beneath the workspace root, the
//!   session's temporary directory ([`ToolContext::temp_dir`], exported as `TMPDIR`) and a few
//!   devices that are harmless to write ([`WRITABLE_DEVICES`]: `/dev/null`, `/dev/zero`, …).
//!   Pipes and sockets inherited or created by the command are not file paths and stay usable
//!   (so `/dev/stdout` and `/dev/stderr`, which name the output pipes, work).
//! - [`SandboxMode::ReadOnly`]: the same without the workspace — only the session's temporary
//!   directory and those devices are writable.
//! - [`SandboxMode::Off`]: no file-system rules.
//! - [`NetworkAccess::Off`]: TCP `connect(2)` and `bind(2)` are denied on every port (Landlock
//!   network rules, ABI ≥ 4). Landlock does not cover UDP or Unix-domain sockets on this ABI:
//!   they stay usable.
//!
//! Landlock checks the object a path resolves to, not the path's spelling: a symlink in the
//! workspace pointing elsewhere, `/proc/self/root/…`, `cd ..` or a hard link all end at the
//! same rule. A denied operation fails with its ordinary error (`EACCES`, "Permission
//! denied"); [`sandbox_note`] words the note `bash` adds to such a result.
//!
//! # How a command gets confined, and why no `unsafe`
//! `landlock_restrict_self(2)` restricts the *calling thread* (and everything it starts later),
//! not the whole process (ABI < 8 has no way to do otherwise, and we do not want it). `bash`
//! therefore builds the ruleset, then starts a short-lived OS thread that restricts itself
//! (`PR_SET_NO_NEW_PRIVS` plus the ruleset, through the `landlock` crate's safe API) and spawns
//! the shell from there: the child inherits that thread's credentials, hence its Landlock
//! domain, from `fork`/`clone` on. The thread exits right after the spawn, so no other thread
//! of the process — the runtime's workers, the journal writer — is ever confined. This needs
//! no `pre_exec` closure: nothing runs between `fork` and `exec` but the standard library's own
//! spawn code, so there is no async-signal-safety question and no `unsafe` block.
//!
//! On a NATS store ([`guard_tcp_ports`]) a command is also kept from the store's ports by a
//! second layer of 65 535 rules, which the kernel copies into every domain: those commands are
//! spawned instead by a long-lived spawner thread per member session, confined once with both
//! layers, whose commands share its domain (it ends after 30 s without a command). It is the
//! only other confined thread; it runs nothing but spawns.
//!
//! # A kernel without Landlock
//! [`probe`] tells whether this kernel can enforce a policy; a front end calls it before
//! starting anything and refuses to run otherwise (never a silent downgrade). Every `bash`
//! call builds its ruleset with the same hard requirements, so even without the probe a
//! command never runs less confined than its policy says: it fails with `SANDBOX_UNSUPPORTED`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetError, RulesetStatus,
};
use rustix::process::{Pid, Signal, kill_process_group};
use tokio::process::{Child, Command};
use troupe_protocol::sync::lock;
use troupe_protocol::{ErrorCode, SessionId};

/// The environment variable that makes [`probe`] (and every confined `bash` call) behave as on
/// a kernel whose Landlock ABI is its value (an integer; `0` = no Landlock). **For tests
/// only**: it lets a test show the refusal on a kernel that does have Landlock. It can only
/// make Troupe refuse a policy, never enforce less: the real kernel is still asked for every
/// rule.
pub const TEST_LANDLOCK_ABI_ENV: &str = "TROUPE_TEST_LANDLOCK_ABI";

/// Devices a confined command may open for writing (when they exist): writing to them changes
/// no file.
pub const WRITABLE_DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

pub use troupe_session::sandbox::{NetworkAccess, SandboxMode, SandboxPolicy};

/// Why a sandbox could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// This kernel cannot enforce the policy: Landlock is missing, disabled, or its ABI is
    /// older than [`SandboxPolicy::required_abi`]. The message names the flags that run
    /// without the missing rules. Code `SANDBOX_UNSUPPORTED`.
    #[error(
        "this kernel cannot enforce the sandbox ({policy}): {reason}; to run commands without \
         it, pass {remedy}"
    )]
    Unsupported {
        /// The policy asked for.
        policy: SandboxPolicy,
        /// What is missing, e.g. `Landlock ABI 3 is older than the 4 network rules need`.
        reason: String,
        /// The flags that lift the missing rules, e.g. `--sandbox off` or `--network on`.
        remedy: &'static str,
    },

    /// A path the rules name could not be opened or prepared (e.g. the workspace was removed,
    /// or the temporary directory is not a directory this user owns). Code
    /// `SANDBOX_SETUP_FAILED`.
    #[error("setting up the sandbox failed: {0}")]
    Setup(String),

    /// A policy looser than the one recorded (or inherited) was asked for: a resumed session
    /// or a new teammate may only be confined more, never less. Code `SANDBOX_LOOSER`.
    #[error(
        "the sandbox ({requested}) would be looser than the recorded one ({recorded}); it can \
         only be made stricter"
    )]
    Looser {
        /// The policy in force.
        recorded: SandboxPolicy,
        /// The policy asked for.
        requested: SandboxPolicy,
    },
}

impl ErrorCode for SandboxError {
    fn code(&self) -> &'static str {
        match self {
            Self::Unsupported { .. } => "SANDBOX_UNSUPPORTED",
            Self::Setup(_) => "SANDBOX_SETUP_FAILED",
            Self::Looser { .. } => "SANDBOX_LOOSER",
        }
    }
}

/// The Landlock ABI the test override ([`TEST_LANDLOCK_ABI_ENV`]) claims, if it is set to an
/// integer.
fn test_abi_override() -> Option<i32> {
    std::env::var(TEST_LANDLOCK_ABI_ENV)
        .ok()
        .and_then(|value| value.trim().parse().ok())
}

/// The flags that run without the rules `policy` needs from an ABI below `abi`.
fn remedy(policy: &SandboxPolicy, abi: i32) -> &'static str {
    if policy.filesystem != SandboxMode::Off && abi < 3 {
        if policy.network == NetworkAccess::Off {
            "--sandbox off --network on"
        } else {
            "--sandbox off"
        }
    } else {
        "--network on"
    }
}

fn unsupported(policy: &SandboxPolicy, abi: i32, reason: String) -> SandboxError {
    SandboxError::Unsupported {
        policy: *policy,
        reason,
        remedy: remedy(policy, abi),
    }
}

/// Whether this kernel can enforce `policy`: `Ok` for [`SandboxPolicy::OFF`] without asking
/// the kernel; otherwise the exact ruleset `bash` builds is created (and dropped, nothing is
/// restricted).
///
/// # Errors
/// `SANDBOX_UNSUPPORTED` when Landlock is missing, disabled or too old for the policy (or
/// [`TEST_LANDLOCK_ABI_ENV`] says so). The message is one line naming the flags that run
/// without the missing rules (`--sandbox off`, `--network on`).
pub fn probe(policy: &SandboxPolicy) -> Result<(), SandboxError> {
    if !policy.confines() {
        return Ok(());
    }
    handled_ruleset(policy).map(drop)
}

/// The ruleset handling every access `policy` restricts, created in the kernel, with no rule
/// yet. File-system access rights of ABI 3 and network rights of ABI 4 are hard requirements;
/// device `ioctl`s (ABI 5) are restricted where the kernel can.
fn handled_ruleset(policy: &SandboxPolicy) -> Result<RulesetCreated, SandboxError> {
    let required = policy.required_abi();
    if let Some(abi) = test_abi_override()
        && abi < required
    {
        return Err(unsupported(
            policy,
            abi,
            format!(
                "Landlock ABI {abi} (set by {TEST_LANDLOCK_ABI_ENV}, a test override) is older \
                 than the {required} these rules need"
            ),
        ));
    }
    let kernel_refused = |error: RulesetError| {
        unsupported(
            policy,
            0,
            format!("Landlock is missing, disabled or older than ABI {required} ({error})"),
        )
    };
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
    if policy.filesystem != SandboxMode::Off {
        ruleset = ruleset
            .handle_access(AccessFs::from_all(ABI::V3))
            .map_err(kernel_refused)?
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(ABI::V5))
            .map_err(kernel_refused)?
            .set_compatibility(CompatLevel::HardRequirement);
    }
    if policy.network == NetworkAccess::Off {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(|error| {
                unsupported(
                    policy,
                    3,
                    format!("Landlock network rules (ABI 4) are not available ({error})"),
                )
            })?;
    }
    ruleset.create().map_err(kernel_refused)
}

/// The TCP ports no confined command may connect to, and the Landlock ruleset that says so.
struct PortGuard {
    /// The guarded ports (never empty).
    ports: BTreeSet<u16>,
    /// The ruleset allowing `connect` to every other port: built by the first confined spawn
    /// that needs it (65 536 − `ports.len()` rules), then only duplicated (`try_clone`, one
    /// `dup`) for each spawn. `Err` holds why the kernel refused it.
    ruleset: OnceLock<Result<RulesetCreated, String>>,
}

/// The guard every confined spawn of this process applies (see [`guard_tcp_ports`]).
static PORT_GUARD: Mutex<Option<Arc<PortGuard>>> = Mutex::new(None);

/// Keeps every command confined from now on (`bash`, MCP servers: whatever
/// [`spawn_confined`] starts under a policy that [confines](SandboxPolicy::confines) with
/// [`NetworkAccess::On`]) from connecting over TCP to any of `ports`, on any address — in
/// addition to the ports guarded before. A front end calls it with the client ports of a NATS
/// session store (`NatsBackend::client_ports`) as soon as it has connected: whoever can
/// reach that server can write every session log, decide approvals and pose as the user on a
/// Team's control subject, so a member's command must not. (The file store needs no guard:
/// `$TROUPE_HOME` is not writable from the sandbox.) [`NetworkAccess::Off`] denies every port
/// anyway; [`SandboxMode::Off`] with the network on confines nothing, this included.
///
/// Enforced by a second Landlock layer handling TCP `connect` only, with a rule allowing each
/// other port: built once per process (per set of ports). The kernel copies a layer's rules
/// into every domain it is applied to, so guarded commands are not each confined on a thread
/// of their own: one spawner thread per member session (per policy, workspace and temporary
/// directory) restricts itself once with the file rules and this layer and spawns all of that
/// session's commands, which share its domain (see `Spawner`; BENCHMARKS.md, "Confined
/// spawn"). A blocked `connect` fails
/// with `EACCES` ("Permission denied"), and [`sandbox_note`] names the rule. A kernel without
/// Landlock's network rules (ABI < 4) cannot enforce it: every confined spawn then fails with
/// `SANDBOX_UNSUPPORTED` (never a silent downgrade).
pub fn guard_tcp_ports(ports: impl IntoIterator<Item = u16>) {
    let mut guard = lock(&PORT_GUARD);
    let mut all: BTreeSet<u16> = guard.as_ref().map(|g| g.ports.clone()).unwrap_or_default();
    let before = all.len();
    all.extend(ports);
    if all.len() != before {
        *guard = Some(Arc::new(PortGuard {
            ports: all,
            ruleset: OnceLock::new(),
        }));
    }
}

/// The TCP ports [`guard_tcp_ports`] guards in this process (empty: none).
pub fn guarded_tcp_ports() -> BTreeSet<u16> {
    lock(&PORT_GUARD)
        .as_ref()
        .map(|g| g.ports.clone())
        .unwrap_or_default()
}

/// The guard a spawn under `policy` applies, if any: a confining policy with the network on,
/// while ports are guarded.
fn port_guard_for(policy: &SandboxPolicy) -> Option<Arc<PortGuard>> {
    if !policy.confines() || policy.network == NetworkAccess::Off {
        return None;
    }
    lock(&PORT_GUARD).clone()
}

/// The ruleset of `ports`: TCP `connect` handled, every port but those allowed.
fn port_ruleset(ports: &BTreeSet<u16>) -> Result<RulesetCreated, String> {
    if let Some(abi) = test_abi_override()
        && abi < 4
    {
        return Err(format!(
            "Landlock ABI {abi} (set by {TEST_LANDLOCK_ABI_ENV}, a test override) has no network \
             rules"
        ));
    }
    let refused = |error: RulesetError| format!("Landlock network rules (ABI 4) failed: {error}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::ConnectTcp)
        .map_err(refused)?
        .create()
        .map_err(refused)?;
    for port in (0..=u16::MAX).filter(|port| !ports.contains(port)) {
        ruleset = ruleset
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(refused)?;
    }
    Ok(ruleset)
}

/// Restricts the calling thread with `guard`'s ruleset (built here on first use), as a layer
/// on top of the one [`restrict_current_thread`] applied.
///
/// # Errors
/// `SANDBOX_UNSUPPORTED` when the kernel cannot build or enforce it.
fn guard_current_thread(policy: &SandboxPolicy, guard: &PortGuard) -> Result<(), SandboxError> {
    let unenforceable = |reason: String| SandboxError::Unsupported {
        policy: *policy,
        reason: format!(
            "the session store's TCP ports ({}) cannot be closed to commands: {reason}",
            port_list(&guard.ports)
        ),
        remedy: "--network off (no TCP at all) or --sandbox off",
    };
    let built = guard
        .ruleset
        .get_or_init(|| port_ruleset(&guard.ports))
        .as_ref()
        .map_err(|reason| unenforceable(reason.clone()))?;
    let ruleset = built
        .try_clone()
        .map_err(|e| unenforceable(format!("duplicating the ruleset failed ({e})")))?;
    restrict_current_thread(policy, ruleset)
}

/// `ports` as `4222, 6222`.
fn port_list(ports: &BTreeSet<u16>) -> String {
    ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The access rights of a writable directory: everything the file-system rules handle.
fn writable_dir_access() -> BitFlags<AccessFs> {
    AccessFs::from_all(ABI::V5)
}

/// The access rights of a writable device: open for reading and writing, truncate (`>` opens
/// with `O_TRUNC`), `ioctl`.
fn writable_device_access() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
}

/// The complete ruleset of `policy` for a command working in `workspace` with `temp_dir` as
/// its temporary directory: read (and execute) everywhere, write where the mode allows.
///
/// # Errors
/// `SANDBOX_UNSUPPORTED` as [`probe`]; `SANDBOX_SETUP_FAILED` when a directory cannot be
/// opened.
pub(crate) fn ruleset(
    policy: &SandboxPolicy,
    workspace: &Path,
    temp_dir: Option<&Path>,
) -> Result<RulesetCreated, SandboxError> {
    let ruleset = handled_ruleset(policy)?;
    if policy.filesystem == SandboxMode::Off {
        return Ok(ruleset);
    }
    let open = |path: &Path| {
        PathFd::new(path)
            .map_err(|error| SandboxError::Setup(format!("{}: {error}", path.display())))
    };
    let rule_failed = |error: RulesetError| SandboxError::Setup(error.to_string());
    // Rights the kernel does not know were already dropped from the handled set (best effort
    // above ABI 3), so the rules drop them too instead of failing.
    let mut ruleset = ruleset
        .set_compatibility(CompatLevel::BestEffort)
        .add_rule(PathBeneath::new(
            open(Path::new("/"))?,
            AccessFs::from_read(ABI::V3),
        ))
        .map_err(rule_failed)?;
    let mut writable: Vec<&Path> = temp_dir.into_iter().collect();
    if policy.filesystem == SandboxMode::WorkspaceWrite {
        writable.push(workspace);
    }
    for dir in writable {
        ruleset = ruleset
            .add_rule(PathBeneath::new(open(dir)?, writable_dir_access()))
            .map_err(rule_failed)?;
    }
    for device in WRITABLE_DEVICES {
        // A device this system lacks (no controlling terminal support, a minimal container)
        // simply gets no rule.
        let Ok(fd) = PathFd::new(device) else {
            continue;
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, writable_device_access()))
            .map_err(rule_failed)?;
    }
    Ok(ruleset)
}

/// Restricts the calling thread with `ruleset` (`PR_SET_NO_NEW_PRIVS` first). Only ever called
/// on a thread that exits right after spawning the confined process.
///
/// # Errors
/// `SANDBOX_UNSUPPORTED` when the kernel did not enforce the ruleset.
pub(crate) fn restrict_current_thread(
    policy: &SandboxPolicy,
    ruleset: RulesetCreated,
) -> Result<(), SandboxError> {
    let status = ruleset.restrict_self().map_err(|error| {
        unsupported(policy, 0, format!("Landlock refused the ruleset ({error})"))
    })?;
    if status.ruleset == RulesetStatus::NotEnforced || !status.no_new_privs {
        return Err(unsupported(
            policy,
            0,
            "Landlock did not enforce the ruleset".to_owned(),
        ));
    }
    Ok(())
}

/// Spawns `command` confined by `policy` (as is, when the policy [confines](SandboxPolicy::confines)
/// nothing): a new OS thread builds the ruleset for `workspace` and `temp_dir`, restricts
/// itself with it and spawns the command, which inherits the thread's Landlock domain; then
/// the thread ends. The calling thread and every other thread of the process stay unconfined
/// (Landlock restricts one thread: see the module docs). The thread enters the caller's tokio
/// runtime, so the child is registered with its process driver. This is how every `bash`
/// command and every MCP stdio server (crate `troupe-mcp`) is started.
///
/// If the caller's future is dropped while the thread spawns, the new process — and its
/// process group, when it leads one (`Command::process_group(0)`) — is killed with `SIGKILL`.
///
/// # Errors
/// The outer `Err` when the sandbox could not be applied (nothing was started):
/// `SANDBOX_UNSUPPORTED`, `SANDBOX_SETUP_FAILED`. The inner `Err` is the OS error of the spawn
/// itself (the program does not exist, is not executable, …) or of starting the thread.
pub async fn spawn_confined(
    mut command: Command,
    policy: SandboxPolicy,
    workspace: PathBuf,
    temp_dir: Option<PathBuf>,
) -> Result<std::io::Result<Child>, SandboxError> {
    if !policy.confines() {
        return Ok(command.spawn());
    }
    let guard = port_guard_for(&policy);
    let runtime = tokio::runtime::Handle::current();
    let (sender, receiver) =
        tokio::sync::oneshot::channel::<Result<std::io::Result<Child>, SandboxError>>();
    if let Some(guard) = guard {
        // Guarded: the session's spawner thread, confined once, spawns it (see `Spawner`).
        Spawner::submit(
            SpawnerKey {
                policy,
                workspace,
                temp_dir,
                guard,
            },
            Job {
                command,
                runtime,
                reply: sender,
            },
        );
        return receiver.await.unwrap_or_else(|_| {
            Ok(Err(std::io::Error::other(
                "the sandbox thread ended without starting the process",
            )))
        });
    }
    let thread = std::thread::Builder::new()
        .name("troupe-sandbox".to_owned())
        .spawn(move || {
            let _entered = runtime.enter();
            let spawned = ruleset(&policy, &workspace, temp_dir.as_deref())
                .and_then(|ruleset| restrict_current_thread(&policy, ruleset))
                .map(|()| command.spawn());
            reply(sender, spawned);
        });
    if let Err(error) = thread {
        return Ok(Err(error));
    }
    receiver.await.unwrap_or_else(|_| {
        Ok(Err(std::io::Error::other(
            "the sandbox thread ended without starting the process",
        )))
    })
}

/// Hands `spawned` to whoever waits for it; when nobody does any more (the caller's future
/// was dropped), stops the new process — and its group, when it leads one — with `SIGKILL`.
fn reply(
    sender: tokio::sync::oneshot::Sender<Result<std::io::Result<Child>, SandboxError>>,
    spawned: Result<std::io::Result<Child>, SandboxError>,
) {
    if let Err(Ok(Ok(child))) = sender.send(spawned) {
        if let Some(pid) = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(Pid::from_raw)
        {
            // ESRCH when the child leads no group: then `kill_on_drop` (or nothing) is all
            // there is.
            let _ = kill_process_group(pid, Signal::KILL);
        }
        drop(child);
    }
}

/// What a spawner confines its commands with: one per policy, workspace, temporary directory
/// and port guard — in practice one per member session on a NATS store.
struct SpawnerKey {
    policy: SandboxPolicy,
    workspace: PathBuf,
    temp_dir: Option<PathBuf>,
    guard: Arc<PortGuard>,
}

impl SpawnerKey {
    fn same(&self, other: &SpawnerKey) -> bool {
        self.policy == other.policy
            && self.workspace == other.workspace
            && self.temp_dir == other.temp_dir
            && Arc::ptr_eq(&self.guard, &other.guard)
    }
}

/// One command to spawn, in `runtime` (entered for the spawn, so the child is registered with
/// its process driver), and where its outcome goes.
struct Job {
    command: Command,
    runtime: tokio::runtime::Handle,
    reply: tokio::sync::oneshot::Sender<Result<std::io::Result<Child>, SandboxError>>,
}

/// The live spawner threads. A job is sent only while this lock is held, and a spawner leaves
/// the list under it (after finding no job queued), so no job is sent to a thread that has
/// stopped taking them.
static SPAWNERS: Mutex<Vec<SpawnerEntry>> = Mutex::new(Vec::new());

/// A live spawner: its number (to leave the list by), key and queue.
type SpawnerEntry = (u64, SpawnerKey, std::sync::mpsc::Sender<Job>);

/// The number of the next spawner.
static NEXT_SPAWNER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How long a spawner waits for its next command before it ends (and its Landlock domain, with
/// its copy of the port rules, is freed once its commands exit too).
const SPAWNER_IDLE: std::time::Duration = std::time::Duration::from_secs(30);

/// A thread that restricts itself once — the file rules of its [`SpawnerKey`], then the port
/// guard's layer — and spawns every command with that key from then on: the commands share
/// its Landlock domain, so the kernel copies the guard's 65 535 rules into a domain once per
/// spawner, not once per command (see BENCHMARKS.md, "Confined spawn"). It ends after
/// [`SPAWNER_IDLE`] without a command. Only guarded spawns use it; no other thread of the
/// process is confined.
struct Spawner;

impl Spawner {
    /// Queues `job` on the spawner of `key`, starting one when there is none.
    fn submit(key: SpawnerKey, job: Job) {
        let mut spawners = lock(&SPAWNERS);
        let job = match spawners.iter().find(|(_, k, _)| k.same(&key)) {
            Some((_, _, jobs)) => match jobs.send(job) {
                Ok(()) => return,
                Err(std::sync::mpsc::SendError(job)) => job,
            },
            None => job,
        };
        spawners.retain(|(_, k, _)| !k.same(&key));
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let number = NEXT_SPAWNER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let policy = key.policy;
        let workspace = key.workspace.clone();
        let temp_dir = key.temp_dir.clone();
        let guard = Arc::clone(&key.guard);
        let started = std::thread::Builder::new()
            .name("troupe-sandbox-spawner".to_owned())
            .spawn(move || {
                Self::serve(
                    number,
                    policy,
                    &workspace,
                    temp_dir.as_deref(),
                    &guard,
                    &queue,
                );
            });
        match started {
            Ok(_) => {
                // The thread cannot have ended yet: it needs this lock to leave the list.
                match jobs.send(job) {
                    Ok(()) => spawners.push((number, key, jobs)),
                    Err(std::sync::mpsc::SendError(job)) => reply(
                        job.reply,
                        Ok(Err(std::io::Error::other(
                            "the sandbox spawner ended at once",
                        ))),
                    ),
                }
            }
            Err(error) => reply(job.reply, Ok(Err(error))),
        }
    }

    /// The thread of spawner `number`: confines itself, then spawns the queued commands until
    /// it has been idle for [`SPAWNER_IDLE`]. When it cannot confine itself it leaves the list
    /// (the next command tries a new spawner) and answers every queued command with the error.
    fn serve(
        number: u64,
        policy: SandboxPolicy,
        workspace: &Path,
        temp_dir: Option<&Path>,
        guard: &PortGuard,
        queue: &std::sync::mpsc::Receiver<Job>,
    ) {
        let leave = |spawners: &mut Vec<SpawnerEntry>| spawners.retain(|(n, _, _)| *n != number);
        let confined = ruleset(&policy, workspace, temp_dir)
            .and_then(|ruleset| restrict_current_thread(&policy, ruleset))
            .and_then(|()| guard_current_thread(&policy, guard));
        if let Err(error) = confined {
            // Nothing is sent once it left the list (sends happen under the lock).
            leave(&mut lock(&SPAWNERS));
            while let Ok(job) = queue.try_recv() {
                reply(job.reply, Err(error.duplicate()));
            }
            return;
        }
        loop {
            let job = match queue.recv_timeout(SPAWNER_IDLE) {
                Ok(job) => job,
                Err(_) => {
                    let mut spawners = lock(&SPAWNERS);
                    match queue.try_recv() {
                        Ok(job) => job,
                        Err(_) => {
                            leave(&mut spawners);
                            return;
                        }
                    }
                }
            };
            let Job {
                mut command,
                runtime,
                reply: sender,
            } = job;
            let _entered = runtime.enter();
            let spawned = command.spawn();
            reply(sender, Ok(spawned));
        }
    }
}

impl SandboxError {
    /// The same error (for every command a failed spawner was asked to start).
    fn duplicate(&self) -> Self {
        match self {
            Self::Unsupported {
                policy,
                reason,
                remedy,
            } => Self::Unsupported {
                policy: *policy,
                reason: reason.clone(),
                remedy,
            },
            Self::Setup(reason) => Self::Setup(reason.clone()),
            Self::Looser {
                recorded,
                requested,
            } => Self::Looser {
                recorded: *recorded,
                requested: *requested,
            },
        }
    }
}

/// The default temporary directory of session `owner`: `<system temp dir>/troupe-<owner>`
/// (`std::env::temp_dir`, i.e. `$TMPDIR` or `/tmp`). `bash` creates it (mode 0700) before a
/// command runs and exports it as `TMPDIR`.
pub fn session_temp_dir(owner: &SessionId) -> PathBuf {
    std::env::temp_dir().join(format!("troupe-{owner}"))
}

/// Creates `dir` (mode 0700, parents as needed) unless it exists, and checks that it is a real
/// directory (not a symlink) owned by this process's user — in a shared `/tmp` another user
/// could otherwise have prepared it.
///
/// # Errors
/// `SANDBOX_SETUP_FAILED` when it cannot be created or fails the check.
pub fn prepare_temp_dir(dir: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let setup = |what: String| SandboxError::Setup(format!("temp dir {}: {what}", dir.display()));
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(|e| setup(e.to_string()))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(setup(e.to_string())),
    }
    let metadata = std::fs::symlink_metadata(dir).map_err(|e| setup(e.to_string()))?;
    if !metadata.is_dir() {
        return Err(setup("not a directory (a symlink?)".to_owned()));
    }
    if metadata.uid() != rustix::process::geteuid().as_raw() {
        return Err(setup(format!("owned by uid {}, not by us", metadata.uid())));
    }
    Ok(())
}

/// The words of a denied operation in a command's output, as the C library and most tools
/// print them: `EACCES` (what Landlock returns for a denied access or TCP port), `EPERM`, and
/// `EXDEV` (what it returns for a link or rename across rule boundaries).
const DENIAL_MARKERS: [&str; 3] = [
    "Permission denied",
    "Operation not permitted",
    "Invalid cross-device link",
];

/// The note `bash` adds to a result when `policy` confines the command and its output shows a
/// denied operation ("Permission denied", "Operation not permitted", "Invalid cross-device
/// link"): which rules were in
/// force, and how to lift them. `None` when the policy confines nothing (then the sandbox
/// cannot be the cause) or the output shows no denial.
pub fn sandbox_note(
    policy: &SandboxPolicy,
    workspace: &Path,
    temp_dir: Option<&Path>,
    output: &[&str],
) -> Option<String> {
    if !policy.confines()
        || !output
            .iter()
            .any(|text| DENIAL_MARKERS.iter().any(|marker| text.contains(marker)))
    {
        return None;
    }
    let temp = temp_dir.map_or(String::new(), |dir| {
        format!(", the session's temp dir {} ($TMPDIR)", dir.display())
    });
    let mut rules = Vec::new();
    match policy.filesystem {
        SandboxMode::WorkspaceWrite => rules.push(format!(
            "--sandbox workspace-write allows writes only in the workspace {}{temp} and \
             /dev/null-like devices",
            workspace.display()
        )),
        SandboxMode::ReadOnly => {
            let temp = match temp_dir {
                Some(dir) => format!(" the session's temp dir {} ($TMPDIR) and", dir.display()),
                None => String::new(),
            };
            rules.push(format!(
                "--sandbox read-only allows no writes, not even in the workspace (only{temp} \
                 /dev/null-like devices)"
            ));
        }
        SandboxMode::Off => {}
    }
    if policy.network == NetworkAccess::Off {
        rules.push("--network off denies every TCP connect and bind".to_owned());
    } else if port_guard_for(policy).is_some() {
        rules.push(format!(
            "TCP connects to the session store's ports ({}) are denied (they would reach the \
             session logs, approvals and the Team's control subject)",
            port_list(&guarded_tcp_ports())
        ));
    }
    Some(format!(
        "note: this command ran in the sandbox, which may have caused the denial: {}. Reading \
         is allowed everywhere. If the task needs more, ask the user to run with --sandbox off \
         (or a looser --sandbox / --network).",
        rules.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_names_only_the_rules_in_force_and_only_on_a_denial() {
        let ws = Path::new("/ws");
        let tmp = Some(Path::new("/tmp/troupe-x"));
        let denied = ["", "bash: /etc/x: Permission denied\n"];
        assert_eq!(
            sandbox_note(&SandboxPolicy::OFF, ws, tmp, &denied),
            None,
            "no rule, no note"
        );
        assert_eq!(
            sandbox_note(&SandboxPolicy::default(), ws, tmp, &["ok\n", ""]),
            None,
            "no denial, no note"
        );
        let note = sandbox_note(&SandboxPolicy::default(), ws, tmp, &denied).unwrap_or_default();
        assert!(note.contains("--sandbox workspace-write allows writes only in the workspace /ws"));
        assert!(note.contains("/tmp/troupe-x ($TMPDIR)"), "{note}");
        assert!(note.contains("--sandbox off"), "{note}");
        assert!(!note.contains("--network off"), "{note}");
        let offline = SandboxPolicy {
            filesystem: SandboxMode::Off,
            network: NetworkAccess::Off,
        };
        let note = sandbox_note(&offline, ws, tmp, &denied).unwrap_or_default();
        assert!(
            note.contains("--network off denies every TCP connect and bind"),
            "{note}"
        );
        assert!(!note.contains("workspace-write"), "{note}");
        let read_only = SandboxPolicy {
            filesystem: SandboxMode::ReadOnly,
            network: NetworkAccess::On,
        };
        let note =
            sandbox_note(&read_only, ws, tmp, &["Operation not permitted"]).unwrap_or_default();
        assert!(
            note.contains(
                "not even in the workspace (only the session's temp dir /tmp/troupe-x ($TMPDIR) \
                 and /dev/null-like devices)"
            ),
            "{note}"
        );
    }

    #[test]
    fn the_remedy_names_the_flags_that_lift_the_missing_rules() {
        let default = SandboxPolicy::default();
        let offline = SandboxPolicy {
            filesystem: SandboxMode::WorkspaceWrite,
            network: NetworkAccess::Off,
        };
        assert_eq!(remedy(&default, 0), "--sandbox off");
        assert_eq!(remedy(&offline, 0), "--sandbox off --network on");
        // ABI 3 enforces the file rules; only the network rules are missing.
        assert_eq!(remedy(&offline, 3), "--network on");
        assert_eq!(default.required_abi(), 3);
        assert_eq!(offline.required_abi(), 4);
        assert_eq!(SandboxPolicy::OFF.required_abi(), 0);
    }

    #[test]
    fn this_kernel_enforces_every_policy() {
        // The kernel these tests run on has Landlock ABI 7 (see docs/ARCHITECTURE.md).
        for filesystem in SandboxMode::ALL {
            for network in [NetworkAccess::On, NetworkAccess::Off] {
                let policy = SandboxPolicy {
                    filesystem,
                    network,
                };
                assert!(probe(&policy).is_ok(), "{policy}");
            }
        }
    }

    #[test]
    fn a_temp_dir_that_is_a_symlink_is_refused() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let real = root.path().join("real");
        let link = root.path().join("link");
        std::fs::create_dir(&real).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&real, &link).unwrap_or_else(|e| panic!("{e}"));
        assert!(prepare_temp_dir(&link).is_err());
        let fresh = root.path().join("a/b");
        assert!(prepare_temp_dir(&fresh).is_ok());
        assert!(fresh.is_dir());
        // Again: an existing directory of ours is fine.
        assert!(prepare_temp_dir(&fresh).is_ok());
    }
}
