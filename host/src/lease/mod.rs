//! Leases this host holds (the leader's, the shards' and the members'): how they are written
//! ([`writer`]: optimistic concurrency, one winner) and how this replica judges whether their
//! holders are live ([`table`]: on its own clock, a holder counted out only after a fresh read).
//!
//! Whoever writes a Lease also tells the Lease's [`crate::fence::FenceKeeper`] about each
//! renewal it sends and how it was answered: that, not the observations here, is what opens a
//! write fence.

pub mod table;
pub mod writer;

pub use table::{LeaseTable, Observed};
pub use writer::{LeaseWriter, Stamp};
