//! The remote requests in flight in one Team's serializer (the Team service's remote path,
//! `super::remote`): two attempts of one request never run side by side. Memory only: a
//! crash loses nothing here, the Lead log decides a retried request (decision 10).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use troupe_protocol::{SessionId, sync::lock};

/// The attempts of remote requests in flight in one Team's serializer, so two attempts of
/// one request never run side by side (see the module docs).
#[derive(Debug, Default)]
pub(super) struct InFlight {
    requests: Mutex<HashMap<(SessionId, String), Arc<Notify>>>,
}

/// One attempt's turn: the others of the same request wait until it is dropped.
pub(super) struct Turn<'a> {
    in_flight: &'a InFlight,
    key: (SessionId, String),
    done: Arc<Notify>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        lock(&self.in_flight.requests).remove(&self.key);
        self.done.notify_waiters();
    }
}

impl InFlight {
    /// Waits until no other attempt of `key` is in flight, then takes the turn.
    pub(super) async fn begin(&self, key: (SessionId, String)) -> Turn<'_> {
        loop {
            let notified = {
                let mut requests = lock(&self.requests);
                match requests.get(&key) {
                    // Created under the lock, so the holder's wakeup (also under it) is seen.
                    Some(done) => Arc::clone(done).notified_owned(),
                    None => {
                        let done = Arc::new(Notify::new());
                        requests.insert(key.clone(), Arc::clone(&done));
                        return Turn {
                            in_flight: self,
                            key,
                            done,
                        };
                    }
                }
            };
            notified.await;
        }
    }
}
