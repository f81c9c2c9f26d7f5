//! Where the session logs live (DESIGN §7, "Selecting it"): `--store URL` / `$TROUPE_STORE`
//! on every command — a NATS JetStream store `nats://HOST:PORT[,HOST:PORT…]`, or a file store
//! `file:DIR` / a plain `DIR`, which is the Troupe home `DIR` (its JSONL files) — else the
//! `store` key of the home's `config.toml` (a NATS URL; see [`choose`]). The default is the
//! JSONL files of the home: nothing changes for a user who never names a store.
//!
//! `--replicas N` sets the replicas of the NATS stream and lease bucket when a command creates
//! them (any command's first connection to a fresh server does); `$TROUPE_LEASE_TTL` (e.g.
//! `3s`) the TTL of the lease bucket when it is created (default 10 s; an existing bucket
//! keeps its own). Every store error is one line naming the URL: an unusable URL, server,
//! stream or bucket is bad input (exit 2), a request that fails while working is a failure of
//! the work (exit 1; see `exit.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use troupe_journal::{Journal, JsonlBackend};
use troupe_protocol::{SessionId, SystemClock};
use troupe_store_nats::{NatsBackend, NatsOptions};

use crate::exit::Failure;
use crate::settings::{Source, Sourced, StoreSettings, UserStore};

/// The environment variable naming the store (as `--store` does).
pub(crate) const STORE_ENV: &str = "TROUPE_STORE";
/// The environment variable setting the lease TTL of a lease bucket this process creates.
pub(crate) const LEASE_TTL_ENV: &str = "TROUPE_LEASE_TTL";

/// `--store` and `--replicas`, taken by every command.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct StoreFlags {
    /// Where the session logs live: nats://HOST:PORT[,HOST:PORT…] (a NATS JetStream store),
    /// or file:DIR / DIR (the JSONL files of that Troupe home). Default: $TROUPE_STORE, else
    /// `store` in the home's config.toml, else the home's JSONL files.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Replicas of the NATS stream and lease bucket when this command creates them (default:
    /// `replicas` in the home's config.toml, else 1; 3 on a three-server cluster). An existing
    /// stream is used as it is.
    #[arg(long, global = true, value_name = "N", value_parser = replicas)]
    pub(crate) replicas: Option<usize>,
}

/// `--replicas N`: 1 to 5 (JetStream's limit).
fn replicas(raw: &str) -> Result<usize, String> {
    let n = crate::args::whole_number_at_most(raw, 5, "replicas: give 1 to 5")?;
    match usize::try_from(n) {
        Ok(n @ 1..=5) => Ok(n),
        _ => Err(format!("{n} replicas: give 1 to 5")),
    }
}

/// A store as named on the command line or in `$TROUPE_STORE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreSpec {
    /// The JSONL files of the Troupe home `DIR` (`file:DIR` or a plain path).
    Files(PathBuf),
    /// A NATS JetStream store (the URL as given).
    Nats(String),
}

impl StoreSpec {
    /// Parses `nats://…`, `file:DIR` or a plain path; `source` names where it came from
    /// (`--store`, `$TROUPE_STORE`, `--from`, …) in the error.
    ///
    /// # Errors
    /// An empty value, another scheme (`http://…`), or `file:` without a directory.
    pub(crate) fn parse(raw: &str, source: &str) -> Result<Self, Failure> {
        // A URL's password or token is never shown (whatever its scheme), a path as given.
        let shown = if raw.contains("://") {
            troupe_store_nats::redact_url(raw)
        } else {
            raw.to_owned()
        };
        let bad = |why: &str| Failure::bad_input(anyhow!("{source} {shown:?}: {why}"));
        if raw.trim().is_empty() {
            return Err(bad(
                "is empty: give nats://HOST:PORT, file:DIR or a directory",
            ));
        }
        if raw.starts_with("nats://") {
            return Ok(Self::Nats(raw.to_owned()));
        }
        if let Some(dir) = raw.strip_prefix("file:") {
            let dir = dir.strip_prefix("//").unwrap_or(dir);
            if dir.is_empty() {
                return Err(bad("names no directory (file:DIR)"));
            }
            return Ok(Self::Files(PathBuf::from(dir)));
        }
        if let Some((scheme, _)) = raw.split_once("://") {
            return Err(bad(&format!(
                "{scheme}:// is not a store: give nats://HOST:PORT[,HOST:PORT…], file:DIR or a \
                 directory"
            )));
        }
        Ok(Self::Files(PathBuf::from(raw)))
    }
}

/// `$TROUPE_CLOCK`: when set, the time every event of this process is stamped with and the
/// "now" of every view (stalled owners in `team show`, the board's reads, the panel), frozen —
/// epoch milliseconds (`1764600000000`) or an RFC 3339 time (`2026-12-01T12:00:00Z`). For
/// tests and reproducible demos: a binary test can say "now is 11 minutes after the owner's
/// last event" without waiting.
pub(crate) const CLOCK_ENV: &str = "TROUPE_CLOCK";

/// The fixed clock `$TROUPE_CLOCK` names, if it is set (and not empty).
///
/// # Errors
/// A value that is neither epoch milliseconds nor an RFC 3339 time (bad input, one line).
pub(crate) fn clock_from_env() -> Result<Option<Arc<dyn troupe_protocol::Clock>>, Failure> {
    let Some(raw) = std::env::var(CLOCK_ENV).ok().filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let ms = match raw.parse::<u64>() {
        Ok(ms) => Some(ms),
        Err(_) => humantime::parse_rfc3339_weak(&raw)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| u64::try_from(d.as_millis()).ok()),
    };
    let ms = ms.ok_or_else(|| {
        Failure::bad_input(anyhow!(
            "{CLOCK_ENV}={raw:?} is not a time: give epoch milliseconds or an RFC 3339 time \
             (e.g. 2026-12-01T12:00:00Z)"
        ))
    })?;
    Ok(Some(Arc::new(troupe_protocol::FixedClock::new(ms))))
}

/// The options of a NATS store this process uses: `--replicas`, `$TROUPE_LEASE_TTL`.
///
/// # Errors
/// A `$TROUPE_LEASE_TTL` that is not a duration of at least one second.
pub(crate) fn nats_options(replicas: Option<usize>) -> Result<NatsOptions, Failure> {
    let mut options = NatsOptions {
        replicas: replicas.unwrap_or(1),
        ..NatsOptions::default()
    };
    if let Some(raw) = std::env::var(LEASE_TTL_ENV).ok().filter(|v| !v.is_empty()) {
        let ttl = humantime::parse_duration(&raw)
            .ok()
            .filter(|ttl| *ttl >= Duration::from_secs(1))
            .ok_or_else(|| {
                Failure::bad_input(anyhow!(
                    "{LEASE_TTL_ENV}={raw:?} is not a lease TTL: give a duration of 1s or more \
                     (e.g. 10s)"
                ))
            })?;
        options.lease_ttl = ttl;
    }
    Ok(options)
}

/// A store opened for a command: its journal, and how commands and messages name it.
#[derive(Clone)]
pub(crate) struct Store {
    /// The sessions.
    pub(crate) journal: Journal,
    /// `None` for the JSONL files; the backend for NATS.
    nats: Option<NatsBackend>,
    /// The session files' directory for the JSONL files.
    files: Option<PathBuf>,
    /// ` --store URL` (quoted) to repeat in printed commands when the store was chosen with
    /// `--store`, else empty.
    pub(crate) arg: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("files", &self.files)
            .field("nats", &self.nats.as_ref().map(NatsBackend::url))
            .finish_non_exhaustive()
    }
}

impl Store {
    /// The JSONL files of the home `home` (`<home>/sessions/`).
    pub(crate) fn files(home: &Path) -> Self {
        Self {
            journal: Journal::open_home(home),
            nats: None,
            files: Some(home.join("sessions")),
            arg: String::new(),
        }
    }

    /// Connects to the NATS store at `url` (creating its stream and lease bucket when
    /// missing).
    ///
    /// # Errors
    /// The store's connection errors, one line naming the URL: `STORE_INVALID_URL`,
    /// `STORE_UNREACHABLE`, `STORE_UNSUPPORTED`, `STORE_MISCONFIGURED` (bad input, exit 2),
    /// `STORE_IO` (exit 1).
    ///
    /// From here on, every command this process confines is kept from the store's client
    /// ports ([`NatsBackend::client_ports`], [`troupe_tools::guard_tcp_ports`]): whoever
    /// reaches the server can write the logs and decide approvals.
    pub(crate) fn nats(url: &str, options: NatsOptions) -> Result<Self, Failure> {
        let backend = NatsBackend::connect(url, options)?;
        troupe_tools::guard_tcp_ports(backend.client_ports());
        Ok(Self {
            journal: Journal::with_backend(Arc::new(backend.clone()), Arc::new(SystemClock)),
            nats: Some(backend),
            files: None,
            arg: String::new(),
        })
    }

    /// Opens `spec` (a file store is the home it names).
    ///
    /// # Errors
    /// As [`Store::nats`].
    pub(crate) fn open(spec: &StoreSpec, replicas: Option<usize>) -> Result<Self, Failure> {
        match spec {
            StoreSpec::Files(home) => Ok(Self::files(home)),
            StoreSpec::Nats(url) => Self::nats(url, nats_options(replicas)?),
        }
    }

    /// Whether a process holds session `id` now (its writer is resident): the kernel's lock
    /// table for the JSONL files, the session's lease on NATS; `None` when that cannot be
    /// told.
    pub(crate) fn resident(&self, id: &SessionId) -> Option<bool> {
        match &self.files {
            Some(dir) => troupe_journal::LockTable::read()
                .is_held(&troupe_journal::JsonlBackend::new(dir.clone()).session_path(id)),
            None => self.journal.holder(id).ok().map(|h| h.is_some()),
        }
    }

    /// Whether this is a NATS store.
    pub(crate) fn is_nats(&self) -> bool {
        self.nats.is_some()
    }

    /// The NATS backend, for a NATS store (its client serves and asks the control subjects of
    /// running Teams: `control.rs`, `send.rs`).
    pub(crate) fn nats_backend(&self) -> Option<&NatsBackend> {
        self.nats.as_ref()
    }

    /// The NATS URL, for a NATS store.
    pub(crate) fn url(&self) -> Option<&str> {
        self.nats.as_ref().map(NatsBackend::url)
    }

    /// Where session `id` is (or would be) stored, for messages: its file, or
    /// `<url>/<stream>/troupe.session.<id>`.
    pub(crate) fn location(&self, id: &SessionId) -> PathBuf {
        match (&self.nats, &self.files) {
            (Some(nats), _) => nats.location(id),
            (None, Some(dir)) => JsonlBackend::new(dir.clone()).session_path(id),
            (None, None) => PathBuf::from(id.as_str()),
        }
    }

    /// The store as the user named it, with where its sessions are: `DIR (DIR/sessions)` or
    /// the URL.
    pub(crate) fn describe(&self, named: &str) -> String {
        match (&self.nats, &self.files) {
            (Some(nats), _) => nats.url().to_owned(),
            (None, Some(dir)) => format!("{named} ({})", dir.display()),
            (None, None) => named.to_owned(),
        }
    }

    /// The store as a place, for messages: its sessions directory, or its URL.
    pub(crate) fn place(&self) -> String {
        match (&self.nats, &self.files) {
            (Some(nats), _) => nats.url().to_owned(),
            (None, Some(dir)) => dir.display().to_string(),
            (None, None) => String::new(),
        }
    }
}

/// Refuses to resume `lead` while it or a session under it (a teammate, a subagent child) is
/// held by a writer, naming the first such session and its holder (`JOURNAL_LOCKED`, bad input:
/// nothing is written) — except a session under it whose lease a live `troupe worker` holds
/// ([`NatsBackend::hosting_worker`]): that teammate keeps running on the worker and calls the
/// resumed Lead's Team service (DESIGN §7 "Failover"; the resume's recovery leaves it there). On NATS the leases of a process that died expire one TTL after each
/// one's last renewal — not all at the same instant, as a dead process's file locks are
/// released — so a resume that started as soon as the Lead's lease was free could find a
/// teammate still held and leave it out. Only a store that can tell holders is asked (NATS).
///
/// # Errors
/// As above; the store's errors listing the sessions or reading a lease.
pub(crate) fn check_team_free(store: &Store, lead: &SessionId) -> Result<(), Failure> {
    let (Some(url), Some(nats)) = (store.url(), store.nats_backend()) else {
        return Ok(());
    };
    let listed = store.journal.list(&mut |_| {})?;
    if let Some((id, holder)) = team_held(&store.journal, nats, &listed, lead)? {
        let which = if id == *lead {
            format!("session {id}")
        } else {
            format!("session {id} (of the Team of {lead})")
        };
        return Err(Failure::bad_input(anyhow!(
            "{which} is locked by {holder} (its lease on {url}): a troupe run or troupe \
             resume of it is still running there; a holder that died frees it once its \
             lease expires (JOURNAL_LOCKED; nothing was written)"
        )));
    }
    Ok(())
}

/// The first session of the Team of `lead` (the Lead first, then every session under it in
/// `listed`) whose lease keeps a resume out, with its holder: the Lead's lease held by
/// anyone, or a member's held by a process that is not a live worker (a teammate a live
/// worker hosts keeps running there and calls the resumed Lead's Team service, DESIGN §7
/// "Failover"). `None`: the Team can be resumed. For [`check_team_free`] and `troupe worker
/// --adopt`.
///
/// # Errors
/// The store's errors reading a lease or the worker registry.
pub(crate) fn team_held(
    journal: &Journal,
    nats: &NatsBackend,
    listed: &[troupe_journal::SessionListing],
    lead: &SessionId,
) -> Result<Option<(SessionId, String)>, troupe_journal::JournalError> {
    let parents: std::collections::HashMap<&SessionId, &SessionId> = listed
        .iter()
        .filter_map(|l| l.header.parent_session.as_ref().map(|p| (&l.header.id, p)))
        .collect();
    let under_lead = |id: &SessionId| {
        let mut at = id;
        for _ in 0..64 {
            match parents.get(at) {
                Some(parent) if *parent == lead => return true,
                Some(parent) => at = parent,
                None => return false,
            }
        }
        false
    };
    let team = std::iter::once(lead).chain(
        listed
            .iter()
            .map(|l| &l.header.id)
            .filter(|id| under_lead(id)),
    );
    for id in team {
        if let Some(holder) = journal.holder(id)? {
            if id != lead && nats.hosting_worker(id)?.is_some() {
                continue;
            }
            return Ok(Some((id.clone(), holder)));
        }
    }
    Ok(None)
}

/// The home a command works in and the store its sessions are in, resolved from `--home`,
/// `--store` and `$TROUPE_STORE`: `--store` wins, then `--home` over a file store of
/// `$TROUPE_STORE` (a flag over the environment); a file store *is* a home, so `--store
/// file:DIR` works in the home `DIR`. Returns the home (`None`: keep the one from `--home` /
/// `$TROUPE_HOME`) and the store spec (`None`: the home's files).
///
/// # Errors
/// An unparsable store; `--store file:A` with a different `--home B`.
pub(crate) fn resolve(
    flags: &StoreFlags,
    home_flag: Option<&Path>,
) -> Result<(Option<PathBuf>, Option<StoreSpec>), Failure> {
    let spec = match &flags.store {
        Some(raw) => Some((StoreSpec::parse(raw, "--store")?, true)),
        None => match std::env::var(STORE_ENV).ok().filter(|v| !v.is_empty()) {
            Some(raw) => Some((StoreSpec::parse(&raw, STORE_ENV)?, false)),
            None => None,
        },
    };
    match spec {
        None => Ok((None, None)),
        Some((StoreSpec::Nats(url), _)) => Ok((None, Some(StoreSpec::Nats(url)))),
        Some((StoreSpec::Files(dir), from_flag)) => match home_flag {
            Some(home) if from_flag && !same_dir(home, &dir) => Err(Failure::bad_input(anyhow!(
                "--store {} and --home {} name two different homes: give one of them",
                dir.display(),
                home.display()
            ))),
            // A flag over the environment: `--home` wins over `$TROUPE_STORE=file:…`.
            Some(_) => Ok((None, None)),
            None => Ok((Some(dir), None)),
        },
    }
}

/// The store and the replicas a command uses, with their sources (see [`StoreSettings`]):
/// `spec` as [`resolve`] gave it when `--store` or `$TROUPE_STORE` names a store, else the
/// user's `store` (`user`, read from the home `home`'s file), else the home's files;
/// `--replicas`, else the user's `replicas`, else 1. `home_flag`: whether `--home` was given
/// (it wins over a file store of `$TROUPE_STORE`).
pub(crate) fn choose(
    flags: &StoreFlags,
    spec: Option<StoreSpec>,
    home: &Path,
    home_flag: bool,
    user: UserStore,
) -> (Option<StoreSpec>, StoreSettings) {
    let home = std::path::absolute(home).unwrap_or_else(|_| home.to_path_buf());
    let env_set = std::env::var(STORE_ENV).is_ok_and(|v| !v.is_empty());
    let named_by = if flags.store.is_some() {
        Some(Source::Flag("--store"))
    } else if env_set {
        Some(if spec.is_none() && home_flag {
            Source::Flag("--home")
        } else {
            Source::Env(STORE_ENV)
        })
    } else {
        None
    };
    let mut settings = StoreSettings::files(&home);
    let spec = match (named_by, user.store) {
        (Some(source), _) => {
            if let Some(StoreSpec::Nats(url)) = &spec {
                settings.store.value = url.clone();
            }
            settings.store.source = source;
            spec
        }
        (None, Some(configured)) => {
            let spec = StoreSpec::Nats(configured.value.clone());
            settings.store = configured;
            Some(spec)
        }
        (None, None) => None,
    };
    settings.replicas = match (flags.replicas, user.replicas) {
        (Some(n), _) => Sourced {
            value: n,
            source: Source::Flag("--replicas"),
        },
        (None, Some(configured)) => configured,
        (None, None) => settings.replicas,
    };
    (spec, settings)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    absolute(a) == absolute(b)
}

/// ` --store URL` for printed commands, when `flags` chose a NATS store with `--store` (a
/// store from `$TROUPE_STORE` is found again by the next command; a file store is printed as
/// `--home`).
pub(crate) fn store_arg(flags: &StoreFlags, spec: Option<&StoreSpec>) -> String {
    match (flags.store.as_ref(), spec) {
        (Some(_), Some(StoreSpec::Nats(url))) => {
            // Shown, so with its credentials redacted (the user adds them back).
            let mut arg = format!(
                " --store {}",
                crate::hints::shell_quote(&troupe_store_nats::redact_url(url))
            );
            if let Some(n) = flags.replicas.filter(|n| *n != 1) {
                arg.push_str(&format!(" --replicas {n}"));
            }
            arg
        }
        _ => String::new(),
    }
}

/// `troupe store …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum StoreCommand {
    /// Copy sessions from one store to another, line for line (migration, backup).
    ///
    /// Every line is copied byte for byte, so a copy of a copy is identical to the original
    /// file. Sessions are read without locking them: a session another process is writing is
    /// copied as far as it is stored. A session the target already holds with the same lines
    /// is left alone, so a copy can be run again; one it holds with other lines is refused
    /// before anything is copied. A copy cut short (kill -9, a lost server) leaves the sessions
    /// it finished whole, and the one it was writing absent from the target — never half of
    /// it: run the copy again.
    Copy(CopyFlags),
}

/// `troupe store copy`.
#[derive(Debug, clap::Args)]
pub(crate) struct CopyFlags {
    /// The store to copy from: nats://HOST:PORT[,…], file:DIR or a directory (a Troupe home).
    #[arg(long, value_name = "STORE")]
    from: String,
    /// The store to copy to (same forms; a NATS stream is created with --replicas if missing).
    #[arg(long, value_name = "STORE")]
    to: String,
    /// The sessions to copy, each with the sessions under it (a Team Lead's teammates): ids or
    /// unique prefixes on the source (default: every session of the source).
    #[arg(value_name = "SESSION")]
    sessions: Vec<String>,
}

/// Runs `troupe store copy`: one line per session on stdout (`copied ID: N events, B bytes`
/// or `already there: ID`), a summary on stderr.
///
/// What survives a crash part-way (see [`Journal::copy_to`]): each session is stored as the
/// target's first append of it, visible whole or not at all, so the sessions copied before
/// the crash are whole and the one being copied is not on the target (its leftovers are
/// removed by the next copy, which stores it whole).
///
/// # Errors
/// Bad input (exit 2, nothing copied): an unusable store, the same store twice, an unknown
/// session, a target holding other lines under a session's id. A copy that fails part-way is
/// exit 1, naming what was copied before it.
pub(crate) fn copy(flags: CopyFlags, replicas: Option<usize>) -> Result<(), Failure> {
    use std::io::Write as _;

    use anyhow::Context as _;
    use troupe_journal::{CopyOutcome, JournalError};

    use crate::output::{Stdout, eprint_line, escape_controls};

    let from_spec = StoreSpec::parse(&flags.from, "--from")?;
    let to_spec = StoreSpec::parse(&flags.to, "--to")?;
    let same = match (&from_spec, &to_spec) {
        (StoreSpec::Files(a), StoreSpec::Files(b)) => same_dir(a, b),
        (StoreSpec::Nats(a), StoreSpec::Nats(b)) => a == b,
        _ => false,
    };
    if same {
        return Err(Failure::bad_input(anyhow!(
            "--from and --to name the same store ({}): nothing to copy",
            flags.from
        )));
    }
    if let StoreSpec::Files(home) = &from_spec
        && !home.join("sessions").is_dir()
    {
        return Err(Failure::bad_input(anyhow!(
            "--from {}: no sessions there ({} is not a directory)",
            home.display(),
            home.join("sessions").display()
        )));
    }
    let from = Store::open(&from_spec, replicas)?;
    let to = Store::open(&to_spec, replicas)?;
    let ids: Vec<SessionId> = if flags.sessions.is_empty() {
        from.journal
            .list(&mut |e| {
                let e = e.to_string();
                eprint_line!(
                    "troupe: note: not copied, its header cannot be read: {}",
                    escape_controls(&e)
                );
            })
            .context("listing the sessions to copy")?
            .into_iter()
            .map(|listing| listing.header.id)
            .collect()
    } else {
        let mut ids = Vec::new();
        for raw in &flags.sessions {
            let id = crate::args::resolve_session(&from.journal, raw)?;
            // An unknown session is bad input before anything is copied.
            from.journal.header(&id)?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        // Each with the sessions under it (a Team Lead's teammates, their subagents): a Lead
        // copied alone is no Team (`team verify` of the copy finds its members missing).
        let listed = from
            .journal
            .list(&mut |_| {})
            .context("listing the sessions under those to copy")?;
        let named = ids.len();
        let mut i = 0;
        while i < ids.len() {
            for listing in &listed {
                if listing.header.parent_session.as_ref() == Some(&ids[i])
                    && !ids.contains(&listing.header.id)
                {
                    ids.push(listing.header.id.clone());
                }
            }
            i += 1;
        }
        if ids.len() > named {
            eprint_line!(
                "troupe: note: with the {} session{} under {}",
                ids.len() - named,
                if ids.len() - named == 1 { "" } else { "s" },
                if named == 1 { "it" } else { "them" }
            );
        }
        ids
    };
    // Nothing is copied when the target holds other lines under one of the ids.
    for id in &ids {
        match to.journal.read_image(id) {
            Ok(there) => {
                let here = from.journal.read_image(id)?;
                if there.bytes() != here.bytes() {
                    return Err(Failure::bad_input(anyhow!(
                        "the target already holds a session {id} with other lines ({}): nothing was copied",
                        there.location().display()
                    )));
                }
            }
            Err(JournalError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // A files target must be able to hold sessions: a place where its `sessions` directory
    // cannot be created (`/proc/x`, a read-only file system, a file in the path) is bad input
    // before anything is copied. (Creating it is what the first copy would do; a crash after
    // it leaves an empty directory, which a copy run again uses.)
    if let StoreSpec::Files(home) = &to_spec
        && !ids.is_empty()
    {
        let sessions = home.join("sessions");
        std::fs::create_dir_all(&sessions).map_err(|e| {
            Failure::bad_input(anyhow!(
                "--to {}: its sessions directory {} cannot be created ({e}): nothing was \
                 copied; pass a directory where you can write",
                home.display(),
                sessions.display()
            ))
        })?;
    }
    let mut out = Stdout::lock();
    let (mut copied, mut there) = (0usize, 0usize);
    for (n, id) in ids.iter().enumerate() {
        let outcome = from.journal.copy_to(id, &to.journal).map_err(|e| {
            let code = crate::exit::exit_code(troupe_protocol::ErrorCode::code(&e));
            let done = if n == 0 {
                "nothing was copied before it".to_owned()
            } else {
                format!("the {n} sessions before it were copied")
            };
            Failure {
                code,
                error: Some(anyhow!(
                    "copying session {id} failed: {e}; {done}; run the copy again to go on"
                )),
            }
        })?;
        match outcome {
            CopyOutcome::Copied {
                events,
                bytes,
                torn_tail,
            } => {
                copied += 1;
                writeln!(out, "copied {id}: {events} events, {bytes} bytes")
                    .context("writing output")?;
                if let Some(torn) = torn_tail {
                    eprint_line!(
                        "troupe: note: session {id}: {} bytes after line {} are an unfinished write ({}); they were not copied",
                        torn.bytes,
                        torn.line.saturating_sub(1),
                        escape_controls(&torn.reason)
                    );
                }
            }
            CopyOutcome::AlreadyThere { events, .. } => {
                there += 1;
                writeln!(out, "already there: {id} ({events} events)").context("writing output")?;
            }
        }
    }
    out.flush().context("writing output")?;
    eprint_line!(
        "troupe store copy: {copied} copied, {there} already there, from {} to {}",
        escape_controls(&from.describe(&flags.from)),
        escape_controls(&to.describe(&flags.to))
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_are_nats_urls_file_urls_or_directories() {
        let parse = |raw: &str| StoreSpec::parse(raw, "--store").ok();
        assert_eq!(
            parse("nats://127.0.0.1:4222,127.0.0.1:4223"),
            Some(StoreSpec::Nats(
                "nats://127.0.0.1:4222,127.0.0.1:4223".into()
            ))
        );
        assert_eq!(
            parse("file:/tmp/h"),
            Some(StoreSpec::Files("/tmp/h".into()))
        );
        assert_eq!(
            parse("file:///tmp/h"),
            Some(StoreSpec::Files("/tmp/h".into()))
        );
        assert_eq!(parse("rel/h"), Some(StoreSpec::Files("rel/h".into())));
        for bad in ["", " ", "file:", "http://x:1", "s3://bucket"] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn replicas_are_one_to_five() {
        assert_eq!(replicas("3"), Ok(3));
        for bad in ["0", "6", "-1", "x"] {
            assert!(replicas(bad).is_err(), "{bad}");
        }
    }
}
