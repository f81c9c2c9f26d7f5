//! The two stores the contract suite runs on: JSONL files in a temp dir, and a NATS JetStream
//! store on a real `nats-server` started for the test.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use troupe_journal::{Journal, JsonlBackend, LogBackend};
use troupe_protocol::FixedClock;
use troupe_store_nats::{NatsBackend, NatsOptions};
use troupe_test_support::NatsServer;

/// A store under test and a way to put raw lines into it (as a crash, another writer or
/// damage would leave them).
pub struct Fixture {
    pub journal: Journal,
    pub backend: Arc<dyn LogBackend>,
    pub kind: Kind,
}

#[allow(clippy::large_enum_variant)] // One per test.
pub enum Kind {
    Files {
        dir: tempfile::TempDir,
    },
    Nats {
        backend: NatsBackend,
        rt: tokio::runtime::Runtime,
        js: jetstream::Context,
        // Dropped last: the server outlives the clients.
        server: NatsServer,
    },
}

/// Options for tests: short timeouts so failures show quickly, a short lease TTL.
pub fn test_options() -> NatsOptions {
    NatsOptions {
        lease_ttl: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        append_timeout: Duration::from_secs(20),
        ..NatsOptions::default()
    }
}

impl Fixture {
    pub fn files() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn LogBackend> = Arc::new(JsonlBackend::new(dir.path()));
        Self {
            journal: Journal::with_backend(Arc::clone(&backend), Arc::new(FixedClock::new(1_000))),
            backend,
            kind: Kind::Files { dir },
        }
    }

    /// `None` when the NATS tests are skipped (`TROUPE_SKIP_NATS=1` without a server).
    pub fn nats() -> Option<Self> {
        Self::nats_with(test_options())
    }

    pub fn nats_with(options: NatsOptions) -> Option<Self> {
        let server = NatsServer::single()?;
        Some(Self::on(server, options))
    }

    pub fn on(server: NatsServer, options: NatsOptions) -> Self {
        let backend = NatsBackend::connect(&server.url(), options).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = server.url();
        let js = rt.block_on(async {
            jetstream::new(
                async_nats::connect(troupe_store_nats::parse_url(&url).unwrap())
                    .await
                    .unwrap(),
            )
        });
        let shared: Arc<dyn LogBackend> = Arc::new(backend.clone());
        Self {
            journal: Journal::with_backend(Arc::clone(&shared), Arc::new(FixedClock::new(1_000))),
            backend: shared,
            kind: Kind::Nats {
                backend,
                rt,
                js,
                server,
            },
        }
    }

    pub fn is_nats(&self) -> bool {
        matches!(self.kind, Kind::Nats { .. })
    }

    /// Another handle on the same store (another "process"), with its own connection.
    pub fn reconnect(&self) -> Journal {
        match &self.kind {
            Kind::Files { dir } => Journal::with_backend(
                Arc::new(JsonlBackend::new(dir.path())),
                Arc::new(FixedClock::new(2_000)),
            ),
            Kind::Nats {
                backend, server, ..
            } => Journal::with_backend(
                Arc::new(NatsBackend::connect(&server.url(), backend.options().clone()).unwrap()),
                Arc::new(FixedClock::new(2_000)),
            ),
        }
    }

    /// Stores `lines` (header first) as session `id`, each line whole (a file with a newline
    /// after each line; one message per line).
    pub fn put_raw(&self, id: &str, lines: &[Vec<u8>]) {
        match &self.kind {
            Kind::Files { dir } => {
                let mut bytes = Vec::new();
                for line in lines {
                    bytes.extend_from_slice(line);
                    bytes.push(b'\n');
                }
                std::fs::write(dir.path().join(format!("{id}.jsonl")), bytes).unwrap();
            }
            Kind::Nats { .. } => self.append_raw(id, lines),
        }
    }

    /// Appends `lines` to session `id` as another writer would.
    pub fn append_raw(&self, id: &str, lines: &[Vec<u8>]) {
        match &self.kind {
            Kind::Files { dir } => {
                use std::io::Write;
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.path().join(format!("{id}.jsonl")))
                    .unwrap();
                for line in lines {
                    file.write_all(line).unwrap();
                    file.write_all(b"\n").unwrap();
                }
            }
            Kind::Nats { rt, js, .. } => rt.block_on(async {
                for line in lines {
                    js.publish(format!("troupe.session.{id}"), line.clone().into())
                        .await
                        .unwrap()
                        .await
                        .unwrap();
                }
            }),
        }
    }

    /// The session's lines as stored (header first).
    pub fn raw_lines(&self, id: &str) -> Vec<Vec<u8>> {
        match &self.kind {
            Kind::Files { dir } => std::fs::read(dir.path().join(format!("{id}.jsonl")))
                .unwrap()
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .map(<[u8]>::to_vec)
                .collect(),
            Kind::Nats { rt, js, .. } => rt.block_on(async {
                let stream = js.get_stream("TROUPE").await.unwrap();
                let subject = format!("troupe.session.{id}");
                let mut out = Vec::new();
                let mut seq = 0;
                while let Ok(message) = stream
                    .get_first_raw_message_by_subject(&subject, seq + 1)
                    .await
                {
                    seq = message.sequence;
                    out.push(message.payload.to_vec());
                }
                out
            }),
        }
    }

    pub fn server(&mut self) -> Option<&mut NatsServer> {
        match &mut self.kind {
            Kind::Nats { server, .. } => Some(server),
            Kind::Files { .. } => None,
        }
    }

    pub fn dir(&self) -> Option<PathBuf> {
        match &self.kind {
            Kind::Files { dir } => Some(dir.path().to_path_buf()),
            Kind::Nats { .. } => None,
        }
    }
}

/// Runs a contract test on both stores: `<name>::files` and `<name>::nats`.
#[macro_export]
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn files() {
                    super::$name(super::support::Fixture::files());
                }
                #[test]
                fn nats() {
                    if let Some(fixture) = super::support::Fixture::nats() {
                        super::$name(fixture);
                    }
                }
            }
        )*
    };
}
