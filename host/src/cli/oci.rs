//! `wasmloop push`, `wasmloop sign`, `wasmloop inspect oci://…`, and the host's OCI flags
//! (`wasmloop run --oci-…`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use wasmloop::hotload::OciSettings;
use wasmloop::oci::auth::RegistryAuth;
use wasmloop::oci::verify::{self, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE};
use wasmloop::oci::{Credentials, OciRef, PullConfig, Puller, TrustPolicy};

/// How the CLI reaches a registry.
#[derive(clap::Args, Debug, Clone)]
pub struct RegistryArgs {
    /// A CA certificate (PEM) trusted for the registry's TLS, beside the system's (repeatable).
    #[arg(long = "registry-ca", env = "WASMLOOP_REGISTRY_CA", value_name = "PEM")]
    ca: Vec<PathBuf>,
    /// A docker config with the registry's credentials (default: $DOCKER_CONFIG/config.json,
    /// else ~/.docker/config.json; none: anonymous).
    #[arg(long = "registry-config", env = "WASMLOOP_REGISTRY_CONFIG", value_name = "JSON")]
    docker_config: Option<PathBuf>,
}

impl RegistryArgs {
    fn puller(&self) -> anyhow::Result<Puller> {
        let config = PullConfig { ca_pem: read_all(&self.ca)?, ..PullConfig::default() };
        Puller::new(config, None).map_err(anyhow::Error::msg)
    }

    fn auth(&self, reference: &OciRef) -> anyhow::Result<RegistryAuth> {
        let path = self.docker_config.clone().or_else(|| {
            let dir = std::env::var_os("DOCKER_CONFIG")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker")))?;
            Some(dir.join("config.json")).filter(|p| p.exists())
        });
        let Some(path) = path else { return Ok(RegistryAuth::Anonymous) };
        let json = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        Ok(Credentials::parse(&json).with_context(|| path.display().to_string())?.for_registry(&reference.registry))
    }
}

fn read_all(paths: &[PathBuf]) -> anyhow::Result<Vec<Vec<u8>>> {
    paths.iter().map(|p| std::fs::read(p).with_context(|| format!("reading {}", p.display()))).collect()
}

/// `wasmloop push FILE oci://REF`.
#[derive(clap::Args, Debug)]
pub struct PushArgs {
    /// The plugin component (.wasm).
    plugin: PathBuf,
    /// Where: `oci://REGISTRY/REPO:TAG`.
    reference: String,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// `wasmloop sign oci://REF@sha256:… --key KEY`.
#[derive(clap::Args, Debug)]
pub struct SignArgs {
    /// The artifact: `oci://REGISTRY/REPO@sha256:…` (a tag is resolved first).
    reference: String,
    /// The signing key: a PEM PKCS#8 ECDSA P-256 private key (`openssl genpkey -algorithm EC
    /// -pkeyopt ec_paramgen_curve:P-256`); its public key (`openssl pkey -pubout`) goes in the
    /// manifest's `oci.signedBy` or the host's --oci-trusted-key.
    #[arg(long)]
    key: PathBuf,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// The host's OCI flags (`wasmloop run`).
#[derive(clap::Args, Debug, Clone)]
pub struct OciRunArgs {
    /// A CA certificate (PEM) trusted for registries' TLS, beside the system's (repeatable).
    #[arg(long = "oci-ca", env = "WASMLOOP_OCI_CA", value_name = "PEM")]
    ca: Vec<PathBuf>,
    /// A cosign public key (PEM, ECDSA P-256) every OCI plugin must be signed by (any one of
    /// those given; repeatable): the cluster-wide trust policy, beside each manifest's own.
    #[arg(long = "oci-trusted-key", env = "WASMLOOP_OCI_TRUSTED_KEY", value_name = "PEM")]
    trusted_keys: Vec<PathBuf>,
    /// Where pulled blobs are kept by digest (default: `oci` beside the precompiled cache).
    #[arg(long = "oci-cache-dir", env = "WASMLOOP_OCI_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Longest one pull (tag, manifest, signature, layer) may take before it is given up (it is
    /// tried again; the last good version serves meanwhile).
    #[arg(long = "oci-pull-timeout", env = "WASMLOOP_OCI_PULL_TIMEOUT", default_value = "60s", value_parser = super::parse_duration)]
    timeout: Duration,
}

impl OciRunArgs {
    /// The settings these flags give, blobs beside `precompiled` (the precompiled cache dir).
    pub fn settings(&self, precompiled: Option<&Path>) -> anyhow::Result<OciSettings> {
        let pems: Vec<String> = self
            .trusted_keys
            .iter()
            .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
            .collect::<anyhow::Result<_>>()?;
        let trust = TrustPolicy::from_pems(&pems).context("--oci-trusted-key")?;
        let cache_dir = self.cache_dir.clone().or_else(|| precompiled.map(|d| d.with_file_name("oci")));
        Ok(OciSettings {
            pull: PullConfig { ca_pem: read_all(&self.ca)?, timeout: self.timeout, ..PullConfig::default() },
            cache_dir,
            trust,
        })
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// `wasmloop push`: the component as a Wasm OCI artifact; prints `oci://…@sha256:…`.
pub fn push(args: PushArgs) -> anyhow::Result<ExitCode> {
    let wasm = wasmloop::bounded::read_file(&args.plugin, wasmloop::plugin::limits::MAX_COMPONENT_SIZE_CAP.bytes())
        .context("reading the plugin (at most the host's hard cap, 64Mi)")?;
    let reference = OciRef::parse(&args.reference)?;
    let (puller, auth) = (args.registry.puller()?, args.registry.auth(&reference)?);
    let digest = runtime()?.block_on(wasmloop::oci::push::push_wasm(puller.client(), &reference, &auth, &wasm))?;
    eprintln!("wasmloop push: {} ({} bytes) → {reference}", args.plugin.display(), wasm.len());
    println!("{}", reference.at(&digest));
    Ok(ExitCode::SUCCESS)
}

/// `wasmloop sign`: a cosign-format signature of the artifact (tag `sha256-<hex>.sig`).
pub fn sign(args: SignArgs) -> anyhow::Result<ExitCode> {
    let key = std::fs::read_to_string(&args.key).with_context(|| format!("reading {}", args.key.display()))?;
    let reference = OciRef::parse(&args.reference)?;
    let (puller, auth) = (args.registry.puller()?, args.registry.auth(&reference)?);
    let rt = runtime()?;
    let digest = rt.block_on(puller.resolve(&reference, &auth, None))?;
    rt.block_on(wasmloop::oci::push::sign(puller.client(), &reference, &auth, &digest, &key))?;
    println!("signed {} (signature at tag {})", reference.at(&digest), verify::signature_tag(&digest));
    Ok(ExitCode::SUCCESS)
}

/// `wasmloop inspect oci://…`: digest, sizes, media types and the signatures found.
pub fn inspect(reference: &str, registry: &RegistryArgs) -> anyhow::Result<ExitCode> {
    let reference = OciRef::parse(reference)?;
    let (puller, auth) = (registry.puller()?, registry.auth(&reference)?);
    let rt = runtime()?;
    let digest = rt.block_on(puller.resolve(&reference, &auth, None))?;
    let pinned = reference.at(&digest);
    let accepted = [wasmloop::oci::OCI_MANIFEST_MEDIA_TYPE, wasmloop::oci::DOCKER_MANIFEST_MEDIA_TYPE, wasmloop::oci::OCI_INDEX_MEDIA_TYPE];
    let (bytes, _) = rt.block_on(puller.client().pull_manifest_raw(&pinned.client_ref(), &auth, &accepted))?;
    if wasmloop::oci::digest_of(&bytes) != digest {
        bail!("the registry's manifest of {pinned} does not match its digest");
    }
    let manifest: serde_json::Value = serde_json::from_slice(&bytes)?;
    println!("artifact:  {pinned}\nmanifest:  {} ({} bytes)", manifest["mediaType"].as_str().unwrap_or("(none)"), bytes.len());
    println!("config:    {} ({} bytes)", manifest["config"]["mediaType"].as_str().unwrap_or("(none)"), manifest["config"]["size"]);
    for layer in manifest["layers"].as_array().into_iter().flatten() {
        println!(
            "layer:     {} {} ({} bytes)",
            layer["mediaType"].as_str().unwrap_or("?"),
            layer["digest"].as_str().unwrap_or("?"),
            layer["size"]
        );
    }
    let signatures = reference.tagged(&verify::signature_tag(&digest));
    match rt.block_on(puller.client().pull_manifest_raw(&signatures.client_ref(), &auth, &accepted[..2])) {
        Ok((bytes, _)) => {
            let sig: serde_json::Value = serde_json::from_slice(&bytes)?;
            let layers = sig["layers"].as_array().cloned().unwrap_or_default();
            let signed = layers
                .iter()
                .filter(|l| l["mediaType"] == SIMPLE_SIGNING_MEDIA_TYPE && l["annotations"][SIGNATURE_ANNOTATION].is_string())
                .count();
            println!(
                "signatures: {signed} cosign signature(s) at tag {} (verify: the host's trusted keys)",
                verify::signature_tag(&digest)
            );
        }
        Err(_) => println!("signatures: none (no tag {})", verify::signature_tag(&digest)),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Probe {
        #[command(flatten)]
        oci: OciRunArgs,
    }

    #[test]
    fn the_blob_cache_defaults_to_beside_the_precompiled_cache() {
        let p = Probe::try_parse_from(["probe"]).unwrap();
        let settings = p.oci.settings(Some(Path::new("/var/cache/wasmloop/precompiled"))).unwrap();
        assert_eq!(settings.cache_dir.as_deref(), Some(Path::new("/var/cache/wasmloop/oci")));
        assert_eq!(settings.pull.timeout, Duration::from_secs(60));
        assert!(settings.trust.is_empty());
        let p = Probe::try_parse_from(["probe", "--oci-cache-dir", "/x", "--oci-pull-timeout", "5s"]).unwrap();
        let settings = p.oci.settings(None).unwrap();
        assert_eq!((settings.cache_dir.as_deref(), settings.pull.timeout), (Some(Path::new("/x")), Duration::from_secs(5)));
        let p = Probe::try_parse_from(["probe", "--oci-trusted-key", "/nonexistent.pub"]).unwrap();
        assert!(p.oci.settings(None).unwrap_err().to_string().contains("/nonexistent.pub"));
    }
}
