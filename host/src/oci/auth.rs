//! Registry credentials in the docker config format (`.dockerconfigjson` of a
//! `kubernetes.io/dockerconfigjson` Secret, as `imagePullSecrets` use, or `~/.docker/config.json`).

use std::collections::BTreeMap;

use base64::Engine;
pub use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

/// What is wrong with a docker config.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// It does not parse.
    #[error("the docker config does not parse: {0}")]
    Parse(String),
    /// An entry's `auth` is not base64 of `user:password`.
    #[error("the docker config's entry for {0} has an `auth` that is not base64 of user:password")]
    BadAuth(String),
}

/// A result whose error is a docker config's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    username: Option<String>,
    password: Option<String>,
    auth: Option<String>,
}

/// Username and password per registry host.
#[derive(Clone, Default)]
pub struct Credentials(BTreeMap<String, (String, String)>);

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl Credentials {
    /// Parse a docker config (`{"auths": {"host:port": {"auth": base64(user:pass)}}}`; `username`
    /// and `password` are accepted instead of `auth`).
    pub fn parse(json: &[u8]) -> Result<Self> {
        let config: DockerConfig = serde_json::from_slice(json).map_err(|e| Error::Parse(e.to_string()))?;
        let mut out = BTreeMap::new();
        for (server, entry) in config.auths {
            let host = normalise(&server);
            let pair = match (entry.auth, entry.username, entry.password) {
                (Some(auth), ..) => {
                    let decoded =
                        base64::engine::general_purpose::STANDARD.decode(auth.trim()).map_err(|_| Error::BadAuth(server.clone()))?;
                    let text = String::from_utf8(decoded).map_err(|_| Error::BadAuth(server.clone()))?;
                    let (u, p) = text.split_once(':').ok_or_else(|| Error::BadAuth(server.clone()))?;
                    (u.to_string(), p.to_string())
                }
                (None, Some(u), Some(p)) => (u, p),
                _ => continue,
            };
            out.insert(host, pair);
        }
        Ok(Self(out))
    }

    /// How to authenticate to `registry` (`host[:port]`): basic auth if the config has it,
    /// else anonymous.
    pub fn for_registry(&self, registry: &str) -> RegistryAuth {
        match self.0.get(registry) {
            Some((u, p)) => RegistryAuth::Basic(u.clone(), p.clone()),
            None => RegistryAuth::Anonymous,
        }
    }
}

/// `https://host:port/v1/` → `host:port` (docker configs carry either form).
fn normalise(server: &str) -> String {
    let s = server.trim_start_matches("https://").trim_start_matches("http://");
    s.split('/').next().unwrap_or(s).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_from_auth_or_username_and_password() {
        let json = br#"{"auths":{"127.0.0.1:5000":{"auth":"dTpw"},"https://r.io/v1/":{"username":"a","password":"b"}}}"#;
        let c = Credentials::parse(json).unwrap();
        assert!(matches!(c.for_registry("127.0.0.1:5000"), RegistryAuth::Basic(u, p) if u == "u" && p == "p"));
        assert!(matches!(c.for_registry("r.io"), RegistryAuth::Basic(u, p) if u == "a" && p == "b"));
        assert!(matches!(c.for_registry("other.io"), RegistryAuth::Anonymous));
        assert_eq!(format!("{c:?}"), r#"["127.0.0.1:5000", "r.io"]"#, "no secret in debug output");
    }

    #[test]
    fn bad_configs_are_named() {
        assert!(matches!(Credentials::parse(b"nope"), Err(Error::Parse(_))));
        assert_eq!(Credentials::parse(br#"{"auths":{"x.io":{"auth":"!!"}}}"#).unwrap_err(), Error::BadAuth("x.io".into()));
    }
}
