//! A watched view of the lease bucket for the Team service's authority check
//! (`crate::teamsvc`): the leases other processes wrote, as this process last saw them, so a
//! request from a teammate whose lease is live is authorized without a KV read per call.
//!
//! **What it holds.** One watch (`KV watch_all`, new entries only) over `TROUPE_LEASES`: every
//! put records the key's owner token, revision and the local instant this process saw it;
//! a delete or purge removes the key. The view only ever *vouches* for a request: a request
//! whose lease is the seen owner at a revision no newer than the seen one, seen less than
//! half a TTL ago, is authorized. Anything else — a key never seen (the watch starts with new
//! entries only), a newer revision, another owner, an entry seen too long ago — is decided by
//! reading the lease bucket, exactly as without the view.
//!
//! **Why half a TTL is safe.** A holder renews every TTL/3, so a live holder's entry is seen
//! again well within TTL/2. The server removes a dead holder's entry one TTL after its last
//! write, and this process saw that write no sooner than it was stored; so the view stops
//! vouching at least TTL/2 before the entry can expire and be taken over by another writer.
//! A lease released on purpose (deleted) is forgotten when the watch delivers the delete; a
//! request racing that delete could have raced a KV read just as well. While the watch is
//! down (the connection lost, the consumer gone), nothing is seen, entries age out within
//! TTL/2 and every request is decided by a read; the watch is made again after a pause.
//!
//! Nothing here is durable: the view is rebuilt from the watch by every process that serves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use troupe_protocol::sync::lock;

use crate::lease::Holder;

/// How long after a failed or ended watch it is made again.
const REWATCH_PAUSE: Duration = Duration::from_millis(500);

/// One key as last seen.
#[derive(Debug)]
struct Seen {
    owner: String,
    revision: u64,
    at: Instant,
}

/// The view (see the module docs); dropping it stops its watch.
#[derive(Debug)]
pub(crate) struct LeaseView {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
    /// How long a seen entry vouches: half the bucket's TTL.
    trust: Duration,
    watcher: tokio::task::JoinHandle<()>,
}

impl LeaseView {
    /// Starts watching `kv` (whose entries live `ttl`) on the calling tokio runtime. Returns at
    /// once; until the watch delivers, the view vouches for nothing.
    pub(crate) fn start(kv: kv::Store, ttl: Duration) -> Self {
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let watcher = tokio::spawn(watch(kv, Arc::clone(&seen)));
        Self {
            seen,
            trust: ttl / 2,
            watcher,
        }
    }

    /// Whether the view vouches that the lease `owner` wrote at `revision` is the current
    /// lease of `key`: the same owner, at a revision no newer than the one seen less than
    /// half a TTL ago. `false` means "read the bucket", never "refuse".
    pub(crate) fn vouches(&self, key: &str, owner: &str, revision: u64) -> bool {
        lock(&self.seen).get(key).is_some_and(|seen| {
            seen.owner == owner && revision <= seen.revision && seen.at.elapsed() < self.trust
        })
    }
}

impl Drop for LeaseView {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// The watch loop: records each entry; a failed or ended watch forgets everything and is
/// made again after [`REWATCH_PAUSE`].
async fn watch(kv: kv::Store, seen: Arc<Mutex<HashMap<String, Seen>>>) {
    loop {
        match kv.watch_all().await {
            Ok(mut entries) => {
                while let Some(entry) = entries.next().await {
                    let Ok(entry) = entry else { break };
                    record(&seen, entry);
                }
            }
            Err(e) => tracing::debug!(error = %e, "the lease watch could not be made"),
        }
        lock(&seen).clear();
        tokio::time::sleep(REWATCH_PAUSE).await;
    }
}

/// One entry into the view: a put of a readable holder is recorded, anything else (a delete,
/// a purge, an unreadable value) removes the key.
fn record(seen: &Mutex<HashMap<String, Seen>>, entry: kv::Entry) {
    let holder = (entry.operation == kv::Operation::Put)
        .then(|| serde_json::from_slice::<Holder>(&entry.value).ok())
        .flatten();
    let mut seen = lock(seen);
    match holder {
        Some(holder) => {
            seen.insert(
                entry.key,
                Seen {
                    owner: holder.owner,
                    revision: entry.revision,
                    at: Instant::now(),
                },
            );
        }
        None => {
            seen.remove(&entry.key);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

    use super::*;
    use troupe_test_support::NatsServer;

    /// How long any condition may take to come true on a loaded machine.
    const DEADLINE: Duration = Duration::from_secs(60);

    async fn bucket(server: &NatsServer, ttl: Duration) -> kv::Store {
        let client = async_nats::connect(crate::parse_url(&server.url()).unwrap())
            .await
            .unwrap();
        async_nats::jetstream::new(client)
            .create_key_value(kv::Config {
                bucket: "VIEW_TEST".to_owned(),
                max_age: ttl,
                ..Default::default()
            })
            .await
            .unwrap()
    }

    fn holder_bytes(owner: &str) -> bytes::Bytes {
        serde_json::to_vec(&Holder {
            owner: owner.to_owned(),
            host: "h".to_owned(),
            pid: 1,
            since: 0,
        })
        .unwrap()
        .into()
    }

    async fn until(what: &str, mut condition: impl FnMut() -> bool) {
        let started = Instant::now();
        while !condition() {
            assert!(started.elapsed() < DEADLINE, "never came true: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn block_on(test: impl std::future::Future<Output = ()>) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(test);
    }

    /// Writes `owner`'s entry under `key` until the view has seen it (the watch starts with
    /// new entries only); returns the revision seen.
    async fn seen(view: &LeaseView, kv: &kv::Store, key: &str, owner: &str) -> u64 {
        let started = Instant::now();
        loop {
            let revision = kv.put(key, holder_bytes(owner)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            if view.vouches(key, owner, revision) {
                return revision;
            }
            assert!(started.elapsed() < DEADLINE, "the watch never delivered");
        }
    }

    /// A put is vouched for (its owner, at its revision or an older one), a delete is
    /// forgotten; another owner, a newer revision and a key never seen are not vouched for.
    /// (The TTL is long: nothing here ages out within the test's deadline.)
    #[test]
    fn vouches_for_the_seen_owner_until_deleted() {
        let Some(server) = NatsServer::single() else {
            return;
        };
        block_on(async {
            let ttl = Duration::from_secs(600);
            let kv = bucket(&server, ttl).await;
            let view = LeaseView::start(kv.clone(), ttl);
            let revision = seen(&view, &kv, "s1", "a").await;
            assert!(view.vouches("s1", "a", revision - 1), "an older revision");
            assert!(
                !view.vouches("s1", "a", revision + 1),
                "a revision not seen"
            );
            assert!(!view.vouches("s1", "b", revision), "another owner");
            assert!(!view.vouches("s2", "a", revision), "a key never seen");
            // Taken over: the old owner is no longer vouched for.
            let taken = seen(&view, &kv, "s1", "b").await;
            assert!(!view.vouches("s1", "a", revision), "the old owner");
            kv.delete("s1").await.unwrap();
            until("the delete was seen", || !view.vouches("s1", "b", taken)).await;
        });
    }

    /// An entry not written again stops being vouched for (half a TTL after it was seen).
    #[test]
    fn an_entry_not_renewed_ages_out() {
        let Some(server) = NatsServer::single() else {
            return;
        };
        block_on(async {
            let ttl = Duration::from_secs(2);
            let kv = bucket(&server, ttl).await;
            let view = LeaseView::start(kv.clone(), ttl);
            let revision = seen(&view, &kv, "s1", "a").await;
            until("the entry aged out", || !view.vouches("s1", "a", revision)).await;
        });
    }
}
