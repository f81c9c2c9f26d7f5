//! `troupe web`: serves the read-only Team panel of a Troupe home (DESIGN §6).

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::{Context, anyhow};
use troupe_web::{WebConfig, access_for, panel_url_with_token, write_token_for};

use crate::exit::Failure;
use crate::output::{Stdout, eprint_line, escape_controls};

/// The port served when `--port` is not given.
pub(crate) const DEFAULT_PORT: u16 = 7420;

/// Flags of `troupe web`.
#[derive(Debug, clap::Args)]
pub(crate) struct WebFlags {
    /// The port to listen on (0: any free port; the URL printed names the real one).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PORT,
          allow_negative_numbers = true, value_parser = parse_port)]
    port: u16,
    /// The address to listen on: an IP address, or `localhost` (127.0.0.1). Anything but a
    /// loopback address also needs --allow-remote.
    #[arg(long, value_name = "ADDR", default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST),
          value_parser = parse_host)]
    host: IpAddr,
    /// Serve a non-loopback --host. The random token printed in the URL is then required on
    /// every API request (the page itself carries no data); on loopback it is needed only to
    /// answer approval requests.
    #[arg(long)]
    allow_remote: bool,
    #[command(flatten)]
    stall: crate::work::StallArgs,
}

/// `--port N`: 0 to 65535 (a negative number is named as such).
fn parse_port(raw: &str) -> Result<u16, String> {
    let port =
        crate::args::whole_number_at_most(raw, u64::from(u16::MAX), "is not a port (0 to 65535)")?;
    u16::try_from(port).map_err(|_| format!("{port} is not a port (0 to 65535)"))
}

/// `--host`: an IP address, or `localhost` for 127.0.0.1 (no name lookup: the panel binds to
/// exactly the address given).
fn parse_host(raw: &str) -> Result<IpAddr, String> {
    if raw.eq_ignore_ascii_case("localhost") {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    raw.trim_matches(|c| c == '[' || c == ']')
        .parse()
        .map_err(|_| format!("{raw} is not an IP address (or `localhost`)"))
}

/// Runs the server until Ctrl-C, SIGTERM or SIGHUP. Prints the URL alone on stdout first.
/// Serves the sessions of `store`: the home's files, or a NATS store (followed live: the
/// server pushes what is appended).
pub(crate) fn run(
    flags: WebFlags,
    home: &std::path::Path,
    store: &crate::store::Store,
) -> Result<(), Failure> {
    let access = access_for(flags.host, flags.allow_remote).map_err(Failure::bad_input)?;
    // Sessions of many workspaces are served: only the user's file can set `stall_after`.
    let stall_after = crate::settings::stall_after_in(home, flags.stall.stall_after)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(flags.host, flags.port))
            .await
            .map_err(|e| {
                let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                    " (another troupe web?): pass another --port, or --port 0 for any free port"
                } else {
                    ""
                };
                Failure::bad_input(anyhow!(
                    "cannot listen on {}: {e}{hint}",
                    SocketAddr::new(flags.host, flags.port)
                ))
            })?;
        let addr = listener.local_addr().context("reading the bound address")?;
        let write_token = write_token_for(&access);
        let url = panel_url_with_token(addr, &write_token);
        let mut out = Stdout::lock();
        writeln!(out, "{url}").context("writing output")?;
        out.flush().context("writing output")?;
        drop(out);
        let place = store.url().map_or_else(
            || format!("in {}", home.display()),
            |url| format!("on {url}"),
        );
        eprint_line!(
            "troupe web: serving the sessions {} at {url} (read-only but for answering \
             approval requests, which needs the token in this URL); Ctrl-C stops",
            escape_controls(&place)
        );
        if !store.is_nats() && !home.exists() {
            eprint_line!(
                "troupe web: note: {} does not exist yet; sessions appear once troupe run or \
                 troupe demo writes them there",
                escape_controls(&home.display().to_string())
            );
        }
        if flags.host.is_unspecified() {
            eprint_line!(
                "troupe web: note: {} listens on every address of this machine: from another \
                 machine, open the URL with this machine's name or address in its place",
                flags.host
            );
        }
        let config = WebConfig {
            access,
            write_token: Some(write_token),
            store: store.is_nats().then(|| store.journal.clone()),
            stall_after,
            clock: std::sync::Arc::clone(store.journal.clock()),
            host_names: store.nats_backend().map(worker_names),
            ..WebConfig::new(home.to_path_buf())
        };
        troupe_web::serve(listener, config, stop_signal())
            .await
            .context("serving the panel")?;
        Ok::<(), Failure>(())
    })
}

/// The panel's names of session holders on a NATS store: a holder (`host H pid P`) that is a
/// live worker is shown by the worker's name (DESIGN §7: the panel shows each live member's
/// host, as `team show` does). The registry is read every 2 s by a task of the server's
/// runtime; a read that fails keeps the names it had.
fn worker_names(nats: &troupe_store_nats::NatsBackend) -> troupe_web::HostNames {
    let names: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>> = Default::default();
    let (nats, kept) = (nats.clone(), std::sync::Arc::clone(&names));
    tokio::spawn(async move {
        loop {
            if let Ok(workers) = troupe_store_nats::live_workers(&nats).await {
                let named = workers
                    .into_iter()
                    .map(|w| (format!("host {} pid {}", w.host, w.pid), w.name))
                    .collect();
                *troupe_protocol::sync::lock(&kept) = named;
            }
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        }
    });
    troupe_web::HostNames::new(move |holder| {
        troupe_protocol::sync::lock(&names)
            .iter()
            .find(|(h, _)| h == holder)
            .map(|(_, name)| name.clone())
    })
}

/// Resolves at the first Ctrl-C, SIGTERM or SIGHUP (or at once if they cannot be watched).
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
        _ = hup.recv() => {}
    }
}
