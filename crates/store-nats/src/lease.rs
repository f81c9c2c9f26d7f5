//! Leases: one writer per session on a shared store (DESIGN §7), in the KV bucket
//! `TROUPE_LEASES`.
//!
//! What survives a crash: a lease is a KV entry whose age limit is the bucket's `max_age` (the
//! TTL). A holder that dies stops renewing it and the server removes it one TTL after its last
//! renewal; until then `create` refuses anyone else. Nothing else depends on the lease being
//! released: the expected-sequence fence of every append keeps a writer that lost its lease
//! from appending after another writer did.
//!
//! **A write whose acknowledgement was lost.** A `create` or renewal can reach the server and
//! be stored while its acknowledgement never comes back (a timeout, a leader killed or
//! changing between storing and answering). The next attempt, made with the revision this
//! process still knows, is refused with "wrong last sequence" — by this process's own entry.
//! So a refused write reads the entry again: when it holds exactly the value this lease
//! writes (the holder's owner token, host and pid), the entry is this lease's; it adopts the
//! entry's revision and goes on. Its validity is then counted from the send time of the first
//! unacknowledged attempt (the stored write was sent at that instant or later, so the server's
//! TTL ends no sooner). Any other value, or no entry, is a lease taken or expired, as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use troupe_journal::Result;
use troupe_protocol::SessionId;
use troupe_protocol::sync::lock;

/// The value stored under a session's key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Holder {
    /// The holding writer's token (also in its messages' `Nats-Msg-Id`).
    pub(crate) owner: String,
    /// The host it runs on.
    pub(crate) host: String,
    /// Its process id.
    pub(crate) pid: u32,
    /// When it took the lease, epoch milliseconds.
    pub(crate) since: u64,
}

impl Holder {
    /// This process, with a fresh owner token.
    pub(crate) fn this_process() -> Self {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self {
            owner: uuid::Uuid::new_v4().simple().to_string(),
            host: rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned(),
            pid: std::process::id(),
            since,
        }
    }

    /// "host H pid P (lease taken at 2026-12-02T16:23:42Z)", as `JOURNAL_LOCKED` names the
    /// holder: the time RFC 3339 UTC to the second (a time that cannot be shown so, past the
    /// year 9999, as its epoch milliseconds).
    pub(crate) fn describe(&self) -> String {
        let taken = std::time::UNIX_EPOCH
            .checked_add(std::time::Duration::from_millis(self.since))
            .filter(|t| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .is_ok_and(|d| d.as_secs() < 253_402_300_800)
            })
            .map_or_else(
                || format!("{} ms after the epoch", self.since),
                |t| humantime::format_rfc3339_seconds(t).to_string(),
            );
        format!(
            "host {} pid {} (lease taken at {taken})",
            self.host, self.pid
        )
    }
}

/// Why a lease could not be taken.
pub(crate) enum AcquireError {
    /// Another writer holds it.
    Held(String),
    /// The request failed.
    Io(String),
}

/// The `lost` reason of a lease its holder released (not a loss: [`HeldLeases::lost`]).
const RELEASED: &str = "it was released";

#[derive(Debug)]
struct State {
    revision: u64,
    /// Until when the lease is certainly ours: the send time of the last successful renewal
    /// plus the TTL (the server counts its age from a later instant).
    valid_until: Instant,
    /// How long after `valid_until` the renewal goes on trying to keep or take the lease again
    /// ([`Retake`]; zero for a lease without one): meanwhile the lease is neither valid nor
    /// lost, and its writer waits.
    retake_window: Duration,
    lost: Option<String>,
}

impl State {
    /// This lease's write of the key was acknowledged at `revision`: valid until `until` (its
    /// send time plus the TTL).
    fn written(&mut self, revision: u64, until: Instant) {
        self.revision = revision;
        self.valid_until = until;
    }

    /// Past its TTL, not lost, and still within the re-take window.
    fn retaking(&self, now: Instant) -> bool {
        self.lost.is_none()
            && now >= self.valid_until
            && now < self.valid_until + self.retake_window
    }
}

/// How long past its TTL a lease with a [`Retake`] is tried again, for a TTL of `ttl`.
fn retake_window(ttl: Duration) -> Duration {
    ttl * 2
}

/// What lets the holder take its lease again when its key expired while the lease bucket could
/// not be reached (a cluster electing the bucket's leader for longer than the TTL left, a
/// server restarted): the session's subject, whose last message must be this holder's.
///
/// **Why that is safe.** Another process can take a session's lease only after the key
/// expired, and can write the session only under the lease; every message carries its
/// writer's owner token in `Nats-Msg-Id`. So when the key is gone and the subject's last
/// message is still this holder's — checked before and again after the `create` that takes
/// the key back — nobody wrote the session since this holder did (one that took the key and
/// gave it up without writing changed nothing), and the holder's own state of the session is
/// current. Otherwise the lease is lost, as without a re-take. Until the verdict the lease is
/// not valid ([`HeldLeases::get`] says `None`, appends wait in [`Lease::ready`]).
#[derive(Clone)]
pub(crate) struct Retake {
    /// The backend's JetStream context.
    pub(crate) js: jetstream::Context,
    /// The session stream's name.
    pub(crate) stream: String,
    /// The session's subject.
    pub(crate) subject: String,
}

/// A held lease as the lease store holds it: the holder's owner token and the revision of the
/// entry it last wrote (see [`crate::NatsBackend::held_lease`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLease {
    /// The owner token (also in the holder's `Nats-Msg-Id`s).
    pub owner: String,
    /// The revision of the lease entry the holder last wrote (it grows at every renewal).
    pub revision: u64,
}

/// The leases one backend holds, by key, for [`crate::NatsBackend::held_lease`]: weak, so a
/// lease dropped or released is simply gone.
#[derive(Debug, Default, Clone)]
pub(crate) struct HeldLeases {
    leases: Arc<Mutex<HashMap<String, HeldEntry>>>,
}

/// A held lease's owner token and (weakly) its live state.
type HeldEntry = (String, Weak<Mutex<State>>);

impl HeldLeases {
    fn register(&self, key: &str, owner: &str, state: &Arc<Mutex<State>>) {
        let mut leases = lock(&self.leases);
        leases.retain(|_, (_, state)| state.strong_count() > 0);
        leases.insert(key.to_owned(), (owner.to_owned(), Arc::downgrade(state)));
    }

    /// The lease held on `key`, while it is held and certainly valid (renewed within its TTL,
    /// not lost, not released).
    pub(crate) fn get(&self, key: &str) -> Option<HeldLease> {
        let (owner, state) = lock(&self.leases).get(key).cloned()?;
        let state = state.upgrade()?;
        let state = lock(&state);
        (state.lost.is_none() && Instant::now() < state.valid_until).then(|| HeldLease {
            owner,
            revision: state.revision,
        })
    }

    /// Whether the lease on `key` is past its TTL and its renewal is still trying to keep or
    /// take it again ([`Retake`]): neither valid nor lost yet.
    pub(crate) fn retaking(&self, key: &str) -> bool {
        let Some((_, state)) = lock(&self.leases).get(key).cloned() else {
            return false;
        };
        state
            .upgrade()
            .is_some_and(|state| lock(&state).retaking(Instant::now()))
    }

    /// [`HeldLeases::get`] once the lease on `key` is not [`HeldLeases::retaking`] any more
    /// (polled every 50 ms; at most the re-take window).
    pub(crate) async fn settled(&self, key: &str) -> Option<HeldLease> {
        while self.retaking(key) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.get(key)
    }

    /// The owner token of the lease this backend took on `key`, while it is neither released
    /// nor dropped — also when it is late to renew or lost (unlike [`HeldLeases::get`]): what
    /// to compare the bucket's entry with to know whether another process took the key.
    pub(crate) fn owner(&self, key: &str) -> Option<String> {
        let (owner, state) = lock(&self.leases).get(key).cloned()?;
        let state = state.upgrade()?;
        let state = lock(&state);
        (state.lost.as_deref() != Some(RELEASED)).then_some(owner)
    }

    /// Why the lease this backend took on `key` is lost (its renewal failed past the TTL, or
    /// its key changed under it), while the lease is still held by its owner (not released or
    /// dropped); `None` when it is not lost or this backend holds none on `key`. A lease only
    /// late to renew (not yet marked lost) is not reported.
    pub(crate) fn lost(&self, key: &str) -> Option<String> {
        let (_, state) = lock(&self.leases).get(key).cloned()?;
        let state = state.upgrade()?;
        let state = lock(&state);
        state.lost.clone().filter(|reason| reason != RELEASED)
    }
}

/// A held lease, renewed in the background every TTL/3 until released or lost.
#[derive(Debug)]
pub(crate) struct Lease {
    key: String,
    /// The value written (the holder), to know the key is still ours.
    value: Bytes,
    kv: kv::Store,
    state: Arc<Mutex<State>>,
    renewer: tokio::task::JoinHandle<()>,
}

impl Lease {
    /// Takes the lease of `key` for `holder` with `create`. Must run on the backend's runtime.
    /// A request that fails (a bucket whose replicas are not answering yet — "no responders"
    /// right after a cluster created it —, a leader election) is tried again for up to
    /// `patience`; a lease held by another is refused at once. With `retake`, a key that
    /// expires while the bucket cannot be reached is taken again when that is safe
    /// ([`Retake`]).
    pub(crate) async fn acquire(
        kv: &kv::Store,
        held: &HeldLeases,
        key: &str,
        holder: &Holder,
        ttl: Duration,
        patience: Duration,
        retake: Option<Retake>,
    ) -> Result<Lease, AcquireError> {
        let deadline = Instant::now() + patience;
        // Every attempt is sent at this instant or later: a `create` of an earlier attempt
        // that was stored without its acknowledgement expires no sooner than this plus the TTL.
        let first_sent = Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            match Self::try_acquire(kv, key, holder, ttl, first_sent, retake.clone()).await {
                Ok(lease) => {
                    held.register(key, &holder.owner, &lease.state);
                    return Ok(lease);
                }
                Err(AcquireError::Io(why)) if Instant::now() < deadline => {
                    tracing::debug!(key, error = %why, "taking a lease failed; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }

    /// One attempt of [`Lease::acquire`]. An entry that already holds exactly this holder's
    /// value is a `create` of an earlier attempt that was stored while its acknowledgement was
    /// lost: it is this lease's, valid from `first_sent` (the send time of the first attempt).
    async fn try_acquire(
        kv: &kv::Store,
        key: &str,
        holder: &Holder,
        ttl: Duration,
        first_sent: Instant,
        retake: Option<Retake>,
    ) -> Result<Lease, AcquireError> {
        let value =
            Bytes::from(serde_json::to_vec(holder).map_err(|e| AcquireError::Io(e.to_string()))?);
        let mut attempts = 0;
        let revision = loop {
            let sent = Instant::now();
            match kv.create(key, value.clone()).await {
                Ok(revision) => break (revision, sent),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                    match kv.entry(key).await {
                        Ok(Some(entry))
                            if entry.operation == kv::Operation::Put && entry.value == value =>
                        {
                            tracing::debug!(
                                key,
                                revision = entry.revision,
                                "the lease's create was stored without its acknowledgement; \
                                 it is ours"
                            );
                            break (entry.revision, first_sent);
                        }
                        Ok(Some(entry)) if entry.operation == kv::Operation::Put => {
                            let holder = serde_json::from_slice::<Holder>(&entry.value)
                                .map_or_else(
                                    |_| {
                                        format!(
                                            "an unknown holder ({})",
                                            String::from_utf8_lossy(&entry.value)
                                        )
                                    },
                                    |h| h.describe(),
                                );
                            return Err(AcquireError::Held(holder));
                        }
                        // Expired or released meanwhile: try again.
                        Ok(_) if attempts < 3 => attempts += 1,
                        Ok(_) => return Err(AcquireError::Io("the lease keeps changing".into())),
                        Err(e) => return Err(AcquireError::Io(e.to_string())),
                    }
                }
                Err(e) => return Err(AcquireError::Io(e.to_string())),
            }
        };
        let state = Arc::new(Mutex::new(State {
            revision: revision.0,
            valid_until: revision.1 + ttl,
            retake_window: if retake.is_some() {
                retake_window(ttl)
            } else {
                Duration::ZERO
            },
            lost: None,
        }));
        let renewer = tokio::spawn(renew(
            Renewal {
                kv: kv.clone(),
                key: key.to_owned(),
                value: value.clone(),
                owner: holder.owner.clone(),
                ttl,
                retake,
            },
            Arc::clone(&state),
        ));
        Ok(Lease {
            key: key.to_owned(),
            value,
            kv: kv.clone(),
            state,
            renewer,
        })
    }

    /// `Ok` while the lease is certainly valid; while its renewal is trying to keep or take it
    /// again past its TTL ([`Retake`]), waits for the verdict (polled every 20 ms, at most the
    /// re-take window); `Err(reason)` when it is lost or may have expired.
    pub(crate) async fn ready(&self) -> Result<(), String> {
        while lock(&self.state).retaking(Instant::now()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.check()
    }

    /// `Err(reason)` when the lease is lost or may have expired.
    pub(crate) fn check(&self) -> Result<(), String> {
        let state = lock(&self.state);
        if let Some(reason) = &state.lost {
            return Err(reason.clone());
        }
        if Instant::now() >= state.valid_until {
            return Err("it was not renewed within its TTL".to_owned());
        }
        Ok(())
    }

    /// Stops renewing and deletes the key (if it is still ours). Best effort: a lease that
    /// cannot be deleted expires after its TTL. A renewal that was in flight when the renewer
    /// stopped may still have been applied, with a revision this lease never learnt: then the
    /// key is read again and, when it still holds this lease's value, deleted at that revision.
    pub(crate) async fn release(self) {
        self.renewer.abort();
        lock(&self.state)
            .lost
            .get_or_insert_with(|| RELEASED.to_owned());
        let mut revision = lock(&self.state).revision;
        for _ in 0..3 {
            if self
                .kv
                .delete_expect_revision(&self.key, Some(revision))
                .await
                .is_ok()
            {
                return;
            }
            match self.kv.entry(&self.key).await {
                Ok(Some(entry))
                    if entry.operation == kv::Operation::Put
                        && entry.value == self.value
                        && entry.revision != revision =>
                {
                    revision = entry.revision;
                }
                _ => return,
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewer.abort();
        lock(&self.state)
            .lost
            .get_or_insert_with(|| RELEASED.to_owned());
    }
}

/// The lease entry of `id` now: its holder's owner token and the entry's revision, `None`
/// when nobody holds it. Runs on any tokio runtime.
///
/// # Errors
/// The KV request's error, as text.
pub(crate) async fn current(kv: &kv::Store, id: &SessionId) -> Result<Option<HeldLease>, String> {
    match kv.entry(id.as_str()).await.map_err(|e| e.to_string())? {
        Some(entry) if entry.operation == kv::Operation::Put => {
            let holder = serde_json::from_slice::<Holder>(&entry.value).map_err(|e| {
                format!(
                    "an unreadable lease entry ({e}): {}",
                    String::from_utf8_lossy(&entry.value)
                )
            })?;
            Ok(Some(HeldLease {
                owner: holder.owner,
                revision: entry.revision,
            }))
        }
        _ => Ok(None),
    }
}

/// The holder of `id`'s lease as the lease bucket holds it now (its host and pid name the
/// process), `None` when nobody holds it.
pub(crate) async fn current_holder(
    kv: &kv::Store,
    id: &SessionId,
) -> Result<Option<Holder>, String> {
    match kv.entry(id.as_str()).await.map_err(|e| e.to_string())? {
        Some(entry) if entry.operation == kv::Operation::Put => {
            serde_json::from_slice::<Holder>(&entry.value)
                .map(Some)
                .map_err(|e| {
                    format!(
                        "an unreadable lease entry ({e}): {}",
                        String::from_utf8_lossy(&entry.value)
                    )
                })
        }
        _ => Ok(None),
    }
}

/// Who holds `id`'s lease now (as [`troupe_journal::JournalError::Leased`] names it), `None` when nobody does.
pub(crate) fn holder(inner: &crate::conn::Inner, id: &SessionId) -> Result<Option<String>> {
    let kv = inner.leases.clone();
    let key = id.to_string();
    let entry = inner.call(async move { kv.entry(&key).await.map_err(|e| e.to_string()) })?;
    match entry.map_err(|e| inner.io("read the session's lease", e))? {
        Some(entry) if entry.operation == kv::Operation::Put => Ok(Some(
            serde_json::from_slice::<Holder>(&entry.value).map_or_else(
                |_| {
                    format!(
                        "an unknown holder ({})",
                        String::from_utf8_lossy(&entry.value)
                    )
                },
                |h| h.describe(),
            ),
        )),
        _ => Ok(None),
    }
}

/// What the renewal loop of one lease needs.
struct Renewal {
    kv: kv::Store,
    key: String,
    /// The value this lease writes (the holder).
    value: Bytes,
    /// The holder's owner token (the last field of its messages' `Nats-Msg-Id`).
    owner: String,
    ttl: Duration,
    retake: Option<Retake>,
}

/// The outcome of one attempt to take an expired key back ([`Renewal::retake`]).
enum Retaken {
    /// Taken again, at this revision, by a `create` sent at this instant.
    Yes(u64, Instant),
    /// Not safe or not possible: the lease is lost, for this reason.
    Lost(String),
    /// The store could not tell (a request failed): try again.
    Unknown(String),
}

/// The renewal loop: `update(revision)` every TTL/3; no success within the TTL marks the lease
/// lost. A refused update ("wrong last sequence") reads the entry again: the value this lease
/// writes there is an earlier renewal stored without its acknowledgement, whose revision is
/// adopted (see the module docs); another value is the key taken over, and the lease is lost.
/// No entry is the key expired (or deleted): without a [`Retake`] the lease is lost; with one
/// it is taken again when that is safe, and failing requests are tried again for the re-take
/// window past the TTL before the lease is lost.
async fn renew(renewal: Renewal, state: Arc<Mutex<State>>) {
    let Renewal {
        kv,
        key,
        value,
        ttl,
        ..
    } = &renewal;
    let period = *ttl / 3;
    let attempt_timeout = period.max(Duration::from_millis(50));
    let mut next = Instant::now() + period;
    // The send time of the first attempt since the last acknowledged write: any of this
    // lease's writes stored meanwhile was sent at that instant or later.
    let mut unacknowledged_since: Option<Instant> = None;
    loop {
        tokio::time::sleep_until(next.into()).await;
        let revision = lock(&state).revision;
        let sent = Instant::now();
        let first_unacknowledged = *unacknowledged_since.get_or_insert(sent);
        let result = tokio::time::timeout(attempt_timeout, async {
            kv.update(key, value.clone(), revision).await
        })
        .await;
        let failed = match result {
            Ok(Ok(revision)) => {
                lock(&state).written(revision, sent + *ttl);
                next = sent + period;
                unacknowledged_since = None;
                continue;
            }
            Ok(Err(e)) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                match tokio::time::timeout(attempt_timeout, kv.entry(key)).await {
                    Ok(Ok(Some(entry)))
                        if entry.operation == kv::Operation::Put && entry.value == *value =>
                    {
                        // Ours: a renewal stored while its acknowledgement was lost. Renew
                        // at once with its revision, so the next acknowledgement comes soon.
                        tracing::info!(
                            key = %key,
                            revision = entry.revision,
                            "a lease renewal was stored without its acknowledgement; it is ours"
                        );
                        let mut st = lock(&state);
                        st.revision = entry.revision;
                        st.valid_until = st.valid_until.max(first_unacknowledged + *ttl);
                        next = Instant::now();
                        continue;
                    }
                    Ok(Ok(Some(entry))) if entry.operation == kv::Operation::Put => {
                        lock(&state).lost = Some(format!(
                            "its key changed under it (another writer took it over): {}",
                            crate::conn::error_text(&e)
                        ));
                        return;
                    }
                    // Expired (or deleted): take it again if nobody wrote the session since
                    // (a lease without a `Retake` is lost).
                    Ok(Ok(_)) => match renewal.retake(attempt_timeout).await {
                        Retaken::Yes(revision, sent) => {
                            tracing::warn!(
                                key = %key,
                                revision,
                                "the lease expired while its bucket could not be reached and \
                                 nobody wrote the session since: taken again"
                            );
                            lock(&state).written(revision, sent + *ttl);
                            next = sent + period;
                            unacknowledged_since = None;
                            continue;
                        }
                        Retaken::Lost(why) => {
                            lock(&state).lost = Some(format!(
                                "its key expired (it could not be renewed within its {} ms \
                                 TTL) and {why}",
                                ttl.as_millis()
                            ));
                            return;
                        }
                        Retaken::Unknown(why) => format!("it expired; taking it again: {why}"),
                    },
                    Ok(Err(read)) => format!(
                        "{}; reading the lease again failed: {}",
                        crate::conn::error_text(&e),
                        crate::conn::error_text(&read)
                    ),
                    Err(_) => format!(
                        "{}; reading the lease again timed out",
                        crate::conn::error_text(&e)
                    ),
                }
            }
            Ok(Err(e)) => crate::conn::error_text(&e),
            Err(_) => "the renewal timed out".to_owned(),
        };
        let mut st = lock(&state);
        let now = Instant::now();
        if now >= st.valid_until && !st.retaking(now) {
            st.lost = Some(if st.retake_window.is_zero() {
                format!(
                    "it could not be renewed within its {} ms TTL: {failed}",
                    ttl.as_millis()
                )
            } else {
                format!(
                    "it could not be renewed within its {} ms TTL nor kept or taken again \
                     within {} ms more: {failed}",
                    ttl.as_millis(),
                    st.retake_window.as_millis()
                )
            });
            return;
        }
        tracing::warn!(key = %key, error = %failed, "lease renewal failed; retrying");
        next = now + (period / 4).max(Duration::from_millis(20));
    }
}

impl Renewal {
    /// Takes the expired key back when the session's last message is still this holder's
    /// (see [`Retake`]): checked, `create`d, checked again (a key that another process took
    /// and gave back meanwhile, after writing, is deleted again and the lease is lost).
    async fn retake(&self, timeout: Duration) -> Retaken {
        let Some(retake) = &self.retake else {
            return Retaken::Lost(
                "this lease is not taken again (it has no session subject)".to_owned(),
            );
        };
        match self.last_is_ours(retake, timeout).await {
            Ok(true) => {}
            Ok(false) => return Retaken::Lost(WRITTEN_SINCE.to_owned()),
            Err(e) => return Retaken::Unknown(e),
        }
        let sent = Instant::now();
        let revision = match tokio::time::timeout(
            timeout,
            self.kv.create(&self.key, self.value.clone()),
        )
        .await
        {
            Ok(Ok(revision)) => revision,
            Ok(Err(e)) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                match tokio::time::timeout(timeout, self.kv.entry(&self.key)).await {
                    // Our own create, stored without its acknowledgement.
                    Ok(Ok(Some(entry)))
                        if entry.operation == kv::Operation::Put && entry.value == self.value =>
                    {
                        entry.revision
                    }
                    Ok(Ok(Some(entry))) if entry.operation == kv::Operation::Put => {
                        return Retaken::Lost("another process took it over".to_owned());
                    }
                    Ok(Ok(_)) => return Retaken::Unknown("the key keeps changing".to_owned()),
                    Ok(Err(e)) => return Retaken::Unknown(e.to_string()),
                    Err(_) => return Retaken::Unknown("reading the key timed out".to_owned()),
                }
            }
            Ok(Err(e)) => return Retaken::Unknown(e.to_string()),
            Err(_) => return Retaken::Unknown("the create timed out".to_owned()),
        };
        // Held again: it stays ours only if nobody wrote between the check and the create.
        let deadline = Instant::now() + timeout * 3;
        let why = loop {
            match self.last_is_ours(retake, timeout).await {
                Ok(true) => return Retaken::Yes(revision, sent),
                Ok(false) => break WRITTEN_SINCE.to_owned(),
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    break format!(
                        "the session's last message could not be read after taking it: {e}"
                    );
                }
            }
        };
        let _ = tokio::time::timeout(
            timeout,
            self.kv.delete_expect_revision(&self.key, Some(revision)),
        )
        .await;
        Retaken::Lost(why)
    }

    /// Whether the session's last message is this holder's (its `Nats-Msg-Id` ends in the
    /// owner token); an empty subject is not.
    async fn last_is_ours(&self, retake: &Retake, timeout: Duration) -> Result<bool, String> {
        let read = async {
            let stream = retake
                .js
                .get_stream_no_info(&retake.stream)
                .await
                .map_err(|e| e.to_string())?;
            match stream
                .get_last_raw_message_by_subject(&retake.subject)
                .await
            {
                Ok(message) => Ok(message
                    .headers
                    .get(async_nats::header::NATS_MESSAGE_ID)
                    .is_some_and(|id| id.as_str().rsplit('/').next() == Some(self.owner.as_str()))),
                Err(e)
                    if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound =>
                {
                    Ok(false)
                }
                Err(e) => Err(e.to_string()),
            }
        };
        tokio::time::timeout(timeout, read)
            .await
            .unwrap_or_else(|_| Err("reading the session's last message timed out".to_owned()))
    }
}

/// Why an expired key is not taken again: the session was written by another process since
/// (or this holder wrote nothing yet).
const WRITTEN_SINCE: &str = "the session's last message is not this process's (another process may have written it \
     since)";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

    use super::*;
    use async_nats::jetstream::stream;
    use troupe_test_support::NatsServer;

    /// How long any condition may take to come true on a loaded machine.
    const DEADLINE: Duration = Duration::from_secs(60);

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// The lease bucket as the backend creates it, with `max_age = ttl`.
    async fn bucket(server: &NatsServer, ttl: Duration) -> kv::Store {
        let client = async_nats::connect(crate::parse_url(&server.url()).unwrap())
            .await
            .unwrap();
        async_nats::jetstream::new(client)
            .create_key_value(kv::Config {
                bucket: crate::DEFAULT_LEASE_BUCKET.to_owned(),
                history: 1,
                max_age: ttl,
                storage: stream::StorageType::File,
                ..Default::default()
            })
            .await
            .unwrap()
    }

    async fn take(
        kv: &kv::Store,
        held: &HeldLeases,
        holder: &Holder,
        ttl: Duration,
    ) -> Result<Lease, String> {
        Lease::acquire(kv, held, "s", holder, ttl, Duration::from_secs(10), None)
            .await
            .map_err(|e| match e {
                AcquireError::Held(by) => format!("held by {by}"),
                AcquireError::Io(why) => format!("failed: {why}"),
            })
    }

    /// A `create` that reached the server while its acknowledgement was lost: the retry finds
    /// this holder's own value under the key and takes it as its lease (it said "locked by
    /// host H pid P" — itself). Another holder (a fresh owner token, even in the same process)
    /// is still refused.
    #[test]
    fn a_create_stored_without_its_acknowledgement_is_this_holders_lease() {
        let Some(server) = NatsServer::single() else {
            return;
        };
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let kv = bucket(&server, ttl).await;
            let holder = Holder::this_process();
            let stored = kv
                .create("s", serde_json::to_vec(&holder).unwrap().into())
                .await
                .unwrap();
            let held = HeldLeases::default();
            let lease = take(&kv, &held, &holder, ttl).await.unwrap();
            lease.check().unwrap();
            assert_eq!(held.get("s").unwrap().revision, stored);
            assert_eq!(held.get("s").unwrap().owner, holder.owner);
            let other = take(&kv, &HeldLeases::default(), &Holder::this_process(), ttl).await;
            let refused = other.expect_err("another holder was refused");
            assert!(
                refused.starts_with("held by host ")
                    && refused.contains(&format!("pid {}", std::process::id())),
                "{refused}"
            );
            lease.release().await;
            assert!(
                kv.entry("s")
                    .await
                    .unwrap()
                    .is_none_or(|e| e.operation != kv::Operation::Put)
            );
        });
    }

    /// A renewal that reached the server while its acknowledgement was lost (written here as
    /// the lease itself would have: its value at its revision): the renewer's next update is
    /// refused as "wrong last sequence", it reads the entry, finds its own value, adopts the
    /// revision and renews on — the lease is not lost.
    #[test]
    fn a_renewal_stored_without_its_acknowledgement_keeps_the_lease() {
        let Some(server) = NatsServer::single() else {
            return;
        };
        let ttl = Duration::from_millis(1500);
        runtime().block_on(async {
            let kv = bucket(&server, ttl).await;
            let holder = Holder::this_process();
            let held = HeldLeases::default();
            let lease = take(&kv, &held, &holder, ttl).await.unwrap();
            let known = lock(&lease.state).revision;
            let stored = kv.update("s", lease.value.clone(), known).await.unwrap();
            let end = Instant::now() + DEADLINE;
            loop {
                {
                    let state = lock(&lease.state);
                    if state.lost.is_some() || state.revision > stored {
                        break;
                    }
                }
                assert!(Instant::now() < end, "the renewer never renewed again");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(lease.check(), Ok(()));
            let revision = lock(&lease.state).revision;
            assert!(revision > stored);
            let entry = kv.entry("s").await.unwrap().unwrap();
            assert_eq!((entry.revision, &entry.value), (revision, &lease.value));
            assert_eq!(held.get("s").map(|h| h.owner), Some(holder.owner.clone()));
        });
    }

    /// Another holder's value under the key (taken over after an expiry) is still a lost lease,
    /// named as such.
    #[test]
    fn a_key_holding_another_holders_value_is_still_a_lost_lease() {
        let Some(server) = NatsServer::single() else {
            return;
        };
        let ttl = Duration::from_millis(1500);
        runtime().block_on(async {
            let kv = bucket(&server, ttl).await;
            let lease = take(&kv, &HeldLeases::default(), &Holder::this_process(), ttl)
                .await
                .unwrap();
            let known = lock(&lease.state).revision;
            let thief = serde_json::to_vec(&Holder::this_process()).unwrap();
            kv.update("s", thief.into(), known).await.unwrap();
            let end = Instant::now() + DEADLINE;
            while lock(&lease.state).lost.is_none() {
                assert!(Instant::now() < end, "the lease was never lost");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let lost = lock(&lease.state).lost.clone().unwrap_or_default();
            assert!(lost.contains("another writer took it over"), "{lost}");
        });
    }
}
