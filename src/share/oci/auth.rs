//! Registry credentials from where container tools keep them: the file
//! `REGISTRY_AUTH_FILE` names (podman, skopeo, buildah), else
//! `$XDG_RUNTIME_DIR/containers/auth.json`, else docker's config.json
//! (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`). Only the
//! `auths` entries are read; a credential helper (`credsStore`) is not run.
//! Credentials never appear in a message.

use std::path::PathBuf;

use base64::Engine as _;

/// `user:password`, as the `auth` field holds it base64-encoded.
#[derive(Clone)]
pub struct Basic(String);

impl std::fmt::Debug for Basic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Basic(..)")
    }
}

impl Basic {
    pub fn header(&self) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(&self.0)
        )
    }
}

const AUTH_FILE_LIMIT: u64 = 1 << 20;

/// What was found for `host`, and the file it came from.
pub fn lookup(host: &str) -> Option<(Basic, PathBuf)> {
    files().into_iter().find_map(|file| {
        // Not ours: a regular file of at most 1 MiB (never a FIFO that
        // blocks or a device that never ends).
        let text = crate::fsutil::read_small(&file, AUTH_FILE_LIMIT).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        let auths = json.get("auths")?.as_object()?;
        // docker writes "host", "https://host" or "https://host/v1/".
        let entry = auths.iter().find_map(|(k, v)| {
            let k = k
                .trim_start_matches("https://")
                .trim_start_matches("http://");
            let k = k.split('/').next().unwrap_or(k);
            (k == host).then_some(v)
        })?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(entry.get("auth")?.as_str()?)
            .ok()?;
        let pair = String::from_utf8(decoded).ok()?;
        pair.contains(':').then(|| (Basic(pair), file.clone()))
    })
}

/// The files looked in, in order: for the message when none has `host`.
pub fn files() -> Vec<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let mut out = Vec::new();
    if let Some(f) = env("REGISTRY_AUTH_FILE") {
        out.push(f);
    }
    if let Some(d) = env("XDG_RUNTIME_DIR") {
        out.push(d.join("containers/auth.json"));
    }
    match env("DOCKER_CONFIG") {
        Some(d) => out.push(d.join("config.json")),
        None => {
            if let Some(h) = env("HOME") {
                out.push(h.join(".docker/config.json"));
            }
        }
    }
    out
}

/// The parameters of a `WWW-Authenticate: Bearer realm="..",service=".."`.
pub fn bearer_params(header: &str) -> Option<Vec<(String, String)>> {
    let rest = header.strip_prefix("Bearer ")?;
    let mut out = Vec::new();
    let mut s = rest.trim();
    while !s.is_empty() {
        let (key, after) = s.split_once('=')?;
        let after = after.trim_start();
        let (value, tail) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (&q[..end], &q[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        out.push((key.trim().to_owned(), value.to_owned()));
        s = tail.trim_start_matches([',', ' ']);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenge() {
        let p = bearer_params(
            r#"Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:a/b:pull""#,
        )
        .unwrap();
        assert_eq!(p[0], ("realm".into(), "https://ghcr.io/token".into()));
        assert_eq!(p[2], ("scope".into(), "repository:a/b:pull".into()));
        assert!(bearer_params("Basic realm=x").is_none());
        assert_eq!(format!("{:?}", Basic("u:secret".into())), "Basic(..)");
    }
}
