//! The handle of a request-serving task (the Team service's `troupe.team.<id>.op`, the
//! deliveries' `troupe.deliver.<id>`): the task subscribes, answers each request in a task of
//! its own, and on stop unsubscribes and hands back the answers still in flight.

use std::time::Duration;

use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

/// How long [`Served::stop`] waits for the requests in flight to be answered.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// A serving task and the token that stops it. Dropped without [`Served::stop`], the task is
/// aborted (a request being answered then gets no answer: its caller retries).
pub(crate) struct Served {
    serve: Option<JoinHandle<JoinSet<()>>>,
    stop: CancellationToken,
}

impl Served {
    /// `serve`, the serving task, returns its in-flight answers once `stop` is cancelled.
    pub(crate) fn new(serve: JoinHandle<JoinSet<()>>, stop: CancellationToken) -> Self {
        Self {
            serve: Some(serve),
            stop,
        }
    }

    /// Stops serving (the task unsubscribes: new requests find no responder) and waits up to
    /// 10 s for the requests in flight to be answered, then aborts the rest.
    pub(crate) async fn stop(mut self) {
        self.stop.cancel();
        if let Some(serve) = self.serve.take()
            && let Ok(mut answering) = serve.await
        {
            let drained = async { while answering.join_next().await.is_some() {} };
            if tokio::time::timeout(STOP_LIMIT, drained).await.is_err() {
                answering.abort_all();
            }
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(serve) = self.serve.take() {
            serve.abort();
        }
    }
}
