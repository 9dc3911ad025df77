//! kube-controller-manager's `pod-template-hash` (`controller.ComputeHash`, v1.20): FNV-32a
//! over the `go-spew` printing of the Deployment's pod template ([`spew`], with the Go types of
//! [`schema`]), then the little-endian bytes of `status.collisionCount` when it is set; the
//! 32-bit sum in decimal, each digit mapped to `bcdfghjklmnpqrstvwxz2456789`
//! (`rand.SafeEncodeString`). The same template gives KCM's ReplicaSet name,
//! `<deployment>-<hash>`.

pub(crate) mod quantity;
pub(crate) mod schema;
pub(crate) mod spew;

use serde_json::Value;

/// The label (and selector term) a Deployment's ReplicaSets and Pods carry their template's hash in.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// A template's hash, and whether it is exactly KCM's (see [`spew::Printed::exact`]: otherwise
/// a hash of the closest printing, stable and still unique per template, but not KCM's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateHash {
    /// The `pod-template-hash` label value.
    pub value: String,
    /// Whether KCM v1.20 would compute the same.
    pub exact: bool,
}

/// The hash of `template` (a `spec.template` as the API server serves it) with
/// `collision_count` (`status.collisionCount`).
pub fn compute(template: &Value, collision_count: Option<i32>) -> TemplateHash {
    let printed = spew::print(&schema::TYPES, schema::POD_TEMPLATE_SPEC, template);
    let mut hash = fnv32a(FNV32_OFFSET, printed.text.as_bytes());
    if let Some(count) = collision_count {
        // Go writes 8 bytes: the uint32 little-endian, then four zero bytes.
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&count.to_le_bytes());
        hash = fnv32a(hash, &bytes);
    }
    TemplateHash { value: safe_encode(&hash.to_string()), exact: printed.exact }
}

/// The spew printing itself (for tests and diagnostics).
pub fn printing(template: &Value) -> String {
    spew::print(&schema::TYPES, schema::POD_TEMPLATE_SPEC, template).text
}

const FNV32_OFFSET: u32 = 0x811c_9dc5;
const FNV32_PRIME: u32 = 0x0100_0193;

fn fnv32a(mut hash: u32, bytes: &[u8]) -> u32 {
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(FNV32_PRIME);
    }
    hash
}

/// `rand.SafeEncodeString`: each character to one of 27 letters and digits without vowels.
fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.chars().map(|c| char::from(ALPHANUMS[(c as usize) % ALPHANUMS.len()])).collect()
}

#[cfg(test)]
mod tests;
