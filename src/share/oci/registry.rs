//! The OCI distribution API over HTTP(S): `/v2/<repo>/blobs`, `/manifests`
//! and `/tags/list`, with the Basic and Bearer-token logins registries use.
//! Plain HTTP only for a registry on this machine (localhost, 127.0.0.1,
//! [::1]), as docker allows; HTTPS for every other host.

use std::io::Read;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, Result};

use super::{Net, auth};
use crate::error::hint;
use crate::ui::Ui;

type Response = ureq::http::Response<ureq::Body>;

pub struct Registry {
    host: String,
    repo: String,
    base: String,
    agent: ureq::Agent,
    net: Net,
    /// The Authorization header, once the registry asked for one.
    authorization: OnceLock<Option<String>>,
    push: std::cell::Cell<bool>,
}

/// Plain HTTP only to this machine: `localhost` or a loopback address,
/// judged by the address, not by how the name starts (`127.evil.example`
/// is a name on the network).
fn is_local(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|a| a.is_loopback())
}

/// Where the registry's token service may be, to be sent a login: over
/// HTTPS (plain HTTP only from a registry on this machine to this machine),
/// on the registry's own host or one of its parent domain (registry-1.
/// docker.io's realm is auth.docker.io).
fn check_realm(registry: &str, realm: &str) -> Result<()> {
    let refuse = |why: &str| {
        crate::error::hint(
            format!("the registry {registry} sends its login to {realm}, {why}"),
            "rdna1-patch will not send your credentials there; check the registry's address, or ask its operator",
        )
    };
    let uri: ureq::http::Uri = realm.parse().map_err(|_| refuse("which is not a URL"))?;
    let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
    let local = is_local(registry) && is_local(host);
    match uri.scheme_str() {
        Some("https") => {}
        Some("http") if local => {}
        _ => return Err(refuse("not over HTTPS")),
    }
    let name = |h: &str| h.rsplit_once(':').map_or(h, |(n, _)| n).to_owned();
    let parent = |h: &str| {
        let labels: Vec<&str> = h.split('.').collect();
        labels[labels.len().saturating_sub(2)..].join(".")
    };
    let reg = name(
        registry
            .trim_start_matches('[')
            .split(']')
            .next()
            .unwrap_or(registry),
    );
    if host == reg || local || (host.contains('.') && parent(host) == parent(&reg)) {
        Ok(())
    } else {
        Err(refuse("another host"))
    }
}

/// The slowest a blob may come, in bytes a second: 64 KiB/s takes a
/// 100 MB layer in 26 minutes; a registry dripping slower is given up on.
const MIN_RATE: u64 = 64 << 10;

impl Registry {
    pub fn new(host: &str, repo: &str, net: Net) -> Result<Registry> {
        let scheme = if is_local(host) { "http" } else { "https" };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(net.timeout))
            .timeout_recv_response(Some(net.timeout))
            .timeout_per_read(Some(net.timeout))
            .timeout_per_write(Some(net.timeout))
            .user_agent(format!("rdna1-patch/{}", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(Registry {
            host: host.to_owned(),
            repo: repo.to_owned(),
            base: format!("{scheme}://{host}/v2"),
            agent,
            net,
            authorization: OnceLock::new(),
            push: std::cell::Cell::new(false),
        })
    }

    /// How long a small answer (a manifest, a tag list, a token) may take
    /// in all: a registry that drips a byte at a time never trips the
    /// per-read timeout.
    fn small_deadline(&self) -> std::time::Duration {
        self.net.timeout * 4
    }

    /// The whole transfer of `size` bytes: the silence allowed, plus the
    /// bytes at the slowest rate taken.
    fn blob_deadline(&self, size: u64) -> std::time::Duration {
        self.net.timeout * 2 + std::time::Duration::from_secs(size / MIN_RATE)
    }

    fn bounded<B>(req: ureq::RequestBuilder<B>, d: std::time::Duration) -> ureq::RequestBuilder<B> {
        req.config().timeout_global(Some(d)).build()
    }

    fn url(&self, rest: &str) -> String {
        format!("{}/{}/{rest}", self.base, self.repo)
    }

    /// What went wrong talking to the registry, with what to check.
    fn unreachable(&self, e: ureq::Error) -> anyhow::Error {
        let why = match &e {
            ureq::Error::Timeout(ureq::Timeout::Global) => format!(
                "the registry {} did not finish answering in time (a whole answer is bounded, not only each wait: {} s for a small one, and at least {} KiB/s for a blob)",
                self.host,
                self.small_deadline().as_secs(),
                MIN_RATE / 1024
            ),
            ureq::Error::Timeout(_) => format!(
                "the registry {} sent nothing for {} s",
                self.host,
                self.net.timeout.as_secs()
            ),
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                format!(
                    "cannot reach the registry {}: connection refused",
                    self.host
                )
            }
            _ => format!("cannot talk to the registry {}: {e}", self.host),
        };
        hint(
            why,
            format!(
                "check that the registry is up and is an OCI registry (curl {}/), or give --net-timeout more seconds; nothing was changed",
                self.base
            ),
        )
    }

    fn failed(&self, what: &str, resp: Response) -> anyhow::Error {
        let status = resp.status();
        let help = match status.as_u16() {
            401 | 403 => format!(
                "log in to {} (docker login, podman login, or an auths entry in one of {}); nothing was changed",
                self.host,
                auth::files()
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            _ => "check the reference and the registry; nothing was changed".to_owned(),
        };
        hint(
            format!(
                "the registry {} refused to {what}: HTTP {status}",
                self.host
            ),
            help,
        )
    }

    /// Find out once whether the registry wants a login, and get the
    /// header for it (a Bearer token from the registry's token service,
    /// or Basic credentials).
    fn authorization(&self) -> Result<Option<String>> {
        if let Some(a) = self.authorization.get() {
            return Ok(a.clone());
        }
        let resp = Self::bounded(
            self.agent.get(format!("{}/", self.base)),
            self.small_deadline(),
        )
        .call()
        .map_err(|e| self.unreachable(e))?;
        let header = if resp.status() == 401 {
            let challenge = resp
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let creds = auth::lookup(&self.host).map(|(c, _)| c);
            match auth::bearer_params(&challenge) {
                Some(params) => Some(self.token(&params, creds.as_ref())?),
                None => creds.map(|c| c.header()),
            }
        } else {
            None
        };
        Ok(self.authorization.get_or_init(|| header).clone())
    }

    fn token(&self, params: &[(String, String)], creds: Option<&auth::Basic>) -> Result<String> {
        let get = |k: &str| params.iter().find(|(p, _)| p == k).map(|(_, v)| v.as_str());
        let realm = get("realm").context("the registry's login challenge names no realm")?;
        check_realm(&self.host, realm)?;
        let action = if self.push.get() { "pull,push" } else { "pull" };
        let scope = format!("repository:{}:{action}", self.repo);
        let mut req =
            Self::bounded(self.agent.get(realm), self.small_deadline()).query("scope", &scope);
        if let Some(service) = get("service") {
            req = req.query("service", service);
        }
        if let Some(c) = creds {
            req = req.header("Authorization", c.header());
        }
        let mut resp = req.call().map_err(|e| self.unreachable(e))?;
        if !resp.status().is_success() {
            return Err(self.failed("give a login token", resp));
        }
        let body = self.small_body(&mut resp).and_then(|b| {
            serde_json::from_slice::<serde_json::Value>(&b)
                .context("the registry's token service did not answer JSON")
        })?;
        let token = body["token"]
            .as_str()
            .or(body["access_token"].as_str())
            .context("the registry's token service gave no token")?;
        Ok(format!("Bearer {token}"))
    }

    /// A small answer's body (at most [`super::SMALL_LIMIT`]); its
    /// callers parse it and say what it should have been.
    fn small_body(&self, resp: &mut Response) -> Result<Vec<u8>> {
        resp.body_mut()
            .with_config()
            .limit(super::SMALL_LIMIT)
            .read_to_vec()
            .map_err(|e| self.unreachable(e))
    }

    fn with_auth<B>(&self, req: ureq::RequestBuilder<B>) -> Result<ureq::RequestBuilder<B>> {
        Ok(match self.authorization()? {
            Some(a) => req.header("Authorization", a),
            None => req,
        })
    }

    pub fn put_blob(&self, file: &Path, digest: &str, size: u64, ui: &Ui) -> Result<bool> {
        self.push.set(true);
        let head = self
            .with_auth(self.agent.head(self.url(&format!("blobs/{digest}"))))?
            .call()
            .map_err(|e| self.unreachable(e))?;
        if head.status().is_success() {
            return Ok(false);
        }
        let start = self
            .with_auth(self.agent.post(self.url("blobs/uploads/")))?
            .send_empty()
            .map_err(|e| self.unreachable(e))?;
        if start.status() != 202 {
            return Err(self.failed("start an upload", start));
        }
        let location = start
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .context("the registry started an upload without saying where")?;
        let location = if location.starts_with('/') {
            let origin = self.base.trim_end_matches("/v2");
            format!("{origin}{location}")
        } else {
            location.to_owned()
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let file = crate::fsutil::open_regular(file)?;
        let progress = ui.progress(size);
        progress.set_prefix("Pushing");
        let body = Counted {
            inner: file,
            done: 0,
            size,
            progress: &*progress,
        };
        let mut body = body;
        let resp = self
            .with_auth(self.agent.put(format!("{location}{sep}digest={digest}")))?
            .header("Content-Type", "application/octet-stream")
            .header("Content-Length", size.to_string())
            .send(ureq::SendBody::from_reader(&mut body))
            .map_err(|e| self.unreachable(e))?;
        progress.finish();
        if resp.status() != 201 {
            return Err(self.failed(&format!("take blob {digest}"), resp));
        }
        Ok(true)
    }

    pub fn put_manifest(&self, tag: &str, bytes: &[u8]) -> Result<String> {
        self.push.set(true);
        let resp = self
            .with_auth(self.agent.put(self.url(&format!("manifests/{tag}"))))?
            .header("Content-Type", super::MANIFEST)
            .send(bytes)
            .map_err(|e| self.unreachable(e))?;
        if resp.status() != 201 {
            return Err(self.failed(&format!("take the manifest for {tag}"), resp));
        }
        Ok(super::sha256_digest(bytes))
    }

    pub fn manifest(&self, reference: &str) -> Result<Option<Vec<u8>>> {
        let mut resp = self
            .with_auth(Self::bounded(
                self.agent.get(self.url(&format!("manifests/{reference}"))),
                self.small_deadline(),
            ))?
            .header("Accept", super::MANIFEST)
            .call()
            .map_err(|e| self.unreachable(e))?;
        if resp.status() == 404 {
            return Ok(None);
        }
        if !resp.status().is_success() {
            return Err(self.failed(&format!("give the manifest {reference}"), resp));
        }
        Ok(Some(self.small_body(&mut resp)?))
    }

    pub fn blob(&self, digest: &str, size: u64) -> Result<Box<dyn Read + Send>> {
        let resp = self
            .with_auth(Self::bounded(
                self.agent.get(self.url(&format!("blobs/{digest}"))),
                self.blob_deadline(size),
            ))?
            .call()
            .map_err(|e| self.unreachable(e))?;
        if !resp.status().is_success() {
            return Err(self.failed(&format!("give blob {digest}"), resp));
        }
        // One byte more than promised is enough to tell a lie.
        let reader = resp
            .into_body()
            .into_with_config()
            .limit(size.saturating_add(1))
            .reader();
        let host = self.host.clone();
        let secs = self.net.timeout.as_secs();
        Ok(Box::new(Explained {
            inner: reader,
            host,
            secs,
            deadline: self.blob_deadline(size).as_secs(),
        }))
    }

    pub fn tags(&self) -> Result<Vec<String>> {
        let mut resp = self
            .with_auth(Self::bounded(
                self.agent.get(self.url("tags/list")).query("n", "10000"),
                self.small_deadline(),
            ))?
            .call()
            .map_err(|e| self.unreachable(e))?;
        if resp.status() == 404 {
            return Ok(Vec::new());
        }
        if !resp.status().is_success() {
            return Err(self.failed("list its tags", resp));
        }
        let body: serde_json::Value = serde_json::from_slice(&self.small_body(&mut resp)?)
            .map_err(|e| {
                hint(
                    format!(
                        "the registry {} listed its tags in something not JSON: {e}",
                        self.host
                    ),
                    "check that it is an OCI registry; nothing was changed",
                )
            })?;
        Ok(body["tags"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// An upload body that moves the progress bar.
struct Counted<'a, R> {
    inner: R,
    done: u64,
    size: u64,
    progress: &'a dyn crate::ui::Progress,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.done += n as u64;
        self.progress.update(self.done, self.size, "");
        Ok(n)
    }
}

/// A download whose I/O errors say which registry stopped sending.
struct Explained<R> {
    inner: R,
    host: String,
    secs: u64,
    /// The whole transfer's bound, in seconds.
    deadline: u64,
}

impl<R: Read> Read for Explained<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            // ureq says which of its timeouts fired; a socket's own says
            // only its kind.
            let timeout = match e.get_ref().and_then(|i| i.downcast_ref::<ureq::Error>()) {
                Some(ureq::Error::Timeout(t)) => Some(*t),
                _ => None,
            };
            let what = match timeout {
                Some(ureq::Timeout::Global) => format!(
                    "the registry {} did not finish sending the blob within {} s (at least {} KiB/s are needed)",
                    self.host,
                    self.deadline,
                    MIN_RATE / 1024
                ),
                Some(_) => format!("the registry {} sent nothing for {} s", self.host, self.secs),
                None if e.kind() == std::io::ErrorKind::TimedOut => {
                    format!("the registry {} sent nothing for {} s", self.host, self.secs)
                }
                None => format!("the download from {} broke off: {e}", self.host),
            };
            std::io::Error::new(e.kind(), what)
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn logins_go_only_to_the_registrys_own_token_service() {
        use super::check_realm;
        assert!(check_realm("ghcr.io", "https://ghcr.io/token").is_ok());
        assert!(check_realm("registry-1.docker.io", "https://auth.docker.io/token").is_ok());
        assert!(check_realm("127.0.0.1:5000", "http://127.0.0.1:5001/auth").is_ok());
        assert!(
            check_realm("ghcr.io", "http://ghcr.io/token").is_err(),
            "no downgrade"
        );
        assert!(check_realm("ghcr.io", "https://evil.example/token").is_err());
        assert!(check_realm("127.0.0.1:5000", "http://evil.example/auth").is_err());
        assert!(check_realm("ghcr.io", "not a url").is_err());
    }

    #[test]
    fn local_hosts_use_http() {
        for h in [
            "localhost:5000",
            "127.0.0.1:41234",
            "[::1]:5000",
            "localhost",
        ] {
            assert!(super::is_local(h), "{h}");
        }
        for h in [
            "ghcr.io",
            "registry.example:5000",
            "128.0.0.1",
            "127.evil.example",
            "127.0.0.1.evil.example:80",
        ] {
            assert!(!super::is_local(h), "{h}");
        }
    }
}
