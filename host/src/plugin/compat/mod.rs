//! Plugins built against earlier contract versions, on this host: each version's calls are
//! converted to and from the current (0.3) types, and its imports (`cache`, `log`) are served by
//! the current ones, so the rest of the host only sees 0.3. Nothing an older plugin can say is
//! lost in a conversion; what it cannot say (0.3's failure actions, index mappings, annotation
//! selectors) is simply absent.

pub(crate) mod v0_1;
pub(crate) mod v0_2;
