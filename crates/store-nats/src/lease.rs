//! Leases: one writer per session on a shared store (DESIGN §7), in the KV bucket
//! `TROUPE_LEASES`.
//!
//! What survives a crash: a lease is a KV entry whose age limit is the bucket's `max_age` (the
//! TTL). A holder that dies stops renewing it and the server removes it one TTL after its last
//! renewal; until then `create` refuses anyone else. Nothing else depends on the lease being
//! released: the expected-sequence fence of every append keeps a writer that lost its lease
//! from appending after another writer did.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
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

    /// "host H pid P (since T)", as `JOURNAL_LOCKED` names the holder.
    pub(crate) fn describe(&self) -> String {
        format!(
            "host {} pid {} (lease taken at {} ms)",
            self.host, self.pid, self.since
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

#[derive(Debug)]
struct State {
    revision: u64,
    /// Until when the lease is certainly ours: the send time of the last successful renewal
    /// plus the TTL (the server counts its age from a later instant).
    valid_until: Instant,
    lost: Option<String>,
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
    /// `patience`; a lease held by another is refused at once.
    pub(crate) async fn acquire(
        kv: &kv::Store,
        held: &HeldLeases,
        key: &str,
        holder: &Holder,
        ttl: Duration,
        patience: Duration,
    ) -> Result<Lease, AcquireError> {
        let deadline = Instant::now() + patience;
        let mut pause = Duration::from_millis(50);
        loop {
            match Self::try_acquire(kv, key, holder, ttl).await {
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

    async fn try_acquire(
        kv: &kv::Store,
        key: &str,
        holder: &Holder,
        ttl: Duration,
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
            lost: None,
        }));
        let renewer = tokio::spawn(renew(
            kv.clone(),
            key.to_owned(),
            value.clone(),
            ttl,
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
            .get_or_insert_with(|| "it was released".to_owned());
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
            .get_or_insert_with(|| "it was released".to_owned());
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

/// The renewal loop: `update(revision)` every TTL/3; a refused update (the key changed: taken
/// over, or expired) or no success within the TTL marks the lease lost.
async fn renew(kv: kv::Store, key: String, value: Bytes, ttl: Duration, state: Arc<Mutex<State>>) {
    let period = ttl / 3;
    let mut next = Instant::now() + period;
    loop {
        tokio::time::sleep_until(next.into()).await;
        let revision = lock(&state).revision;
        let sent = Instant::now();
        let result = tokio::time::timeout(period.max(Duration::from_millis(50)), async {
            kv.update(&key, value.clone(), revision).await
        })
        .await;
        let mut st = lock(&state);
        match result {
            Ok(Ok(revision)) => {
                st.revision = revision;
                st.valid_until = sent + ttl;
                next = sent + period;
            }
            Ok(Err(e)) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                st.lost = Some(format!(
                    "its key changed under it (it expired or another writer took it over): {e}"
                ));
                return;
            }
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "the renewal timed out".to_owned(),
                };
                if Instant::now() >= st.valid_until {
                    st.lost = Some(format!(
                        "it could not be renewed within its {} ms TTL: {why}",
                        ttl.as_millis()
                    ));
                    return;
                }
                tracing::warn!(key = %key, error = %why, "lease renewal failed; retrying");
                next = Instant::now() + (period / 4).max(Duration::from_millis(20));
            }
        }
    }
}
