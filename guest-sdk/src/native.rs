//! Native builds: cache reads and logs go to a [`Backend`] installed on the calling thread for
//! the duration of a call: the `testing` fake, or a host embedding the reconciler natively
//! ([`crate::embed`]). Outside such a call reads fail with [`Error::NoHost`].

use std::cell::RefCell;
use std::rc::Rc;

use crate::cache::Error;
use crate::log::Level;
use crate::meta::Meta;
use crate::object::ObjectMeta;
use crate::types::KindRef;

/// A metadata record and its declared fields.
pub(crate) type MetaRecord = (ObjectMeta, Vec<Option<String>>);

/// What answers a natively run reconciler's cache reads ([`crate::cache`], [`crate::meta`]) and
/// takes its logs ([`crate::log`]): the host's side of the contract's `cache` and `log` imports.
///
/// Implementations answer as the wasmloop host does: only the kinds the reconciler may read
/// (others fail with [`Error::NotGranted`]), objects as JSON text, the `namespace` and `owner`
/// indexes plus those the reconciler declared, and metadata reads with the fields declared
/// for the kind ([`Metadata::field`](crate::Metadata::field)) in declaration order.
///
/// The `*_meta` methods have default implementations built on the JSON reads and
/// [`Backend::metas`]; a host that keeps parsed metadata can override them to skip the JSON.
pub trait Backend {
    /// The JSON of one object, or `None` if it is not cached ([`crate::cache::get_raw`]).
    fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<String>, Error>;
    /// The JSON of the objects of `kind`, optionally in one namespace and matching a label
    /// selector ([`crate::cache::list_raw`]).
    fn list(&self, kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<String>, Error>;
    /// The JSON of the objects whose index `index` has `value` ([`crate::cache::by_index_raw`]).
    fn by_index(&self, kind: &KindRef, index: &str, value: &str) -> Result<Vec<String>, Error>;
    /// The metadata and declared fields of `objects`, JSON of `kind` as this backend's
    /// `get`/`list`/`by_index` returned it, in the same order.
    fn metas(&self, kind: &KindRef, objects: Vec<String>) -> Vec<Meta>;
    /// The metadata of one object ([`crate::meta::get`]).
    fn get_meta(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<Meta>, Error> {
        let found = self.get(kind, namespace, name)?;
        Ok(self.metas(kind, found.into_iter().collect()).pop())
    }
    /// The metadata of the objects of `kind` ([`crate::meta::list`]).
    fn list_meta(&self, kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<Meta>, Error> {
        let found = self.list(kind, namespace, selector)?;
        Ok(self.metas(kind, found))
    }
    /// The metadata of the objects whose index `index` has `value` ([`crate::meta::by_index`]).
    fn by_index_meta(&self, kind: &KindRef, index: &str, value: &str) -> Result<Vec<Meta>, Error> {
        let found = self.by_index(kind, index, value)?;
        Ok(self.metas(kind, found))
    }
    /// [`Backend::list_meta`] in the packed form ([`crate::meta::list_packed`]).
    fn list_meta_packed(&self, kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<u8>, Error> {
        Ok(crate::meta::pack(&self.list_meta(kind, namespace, selector)?))
    }
    /// [`Backend::by_index_meta`] in the packed form ([`crate::meta::by_index_packed`]).
    fn by_index_meta_packed(&self, kind: &KindRef, index: &str, value: &str) -> Result<Vec<u8>, Error> {
        Ok(crate::meta::pack(&self.by_index_meta(kind, index, value)?))
    }
    /// A message the reconciler logged ([`crate::log`]).
    fn log(&self, level: Level, message: &str);
    /// Now, for [`crate::time`], in microseconds since the Unix epoch; `None` (the default): the
    /// system clock. The `testing` fake answers with its settable clock.
    fn now_micros(&self) -> Option<i64> {
        None
    }
}

thread_local! {
    /// The backend of the innermost [`with_backend`] call running on this thread.
    static BACKEND: RefCell<Option<Rc<dyn Backend>>> = const { RefCell::new(None) };
}

/// Puts the previous backend back when dropped (also while unwinding from a panic).
struct Restore(Option<Rc<dyn Backend>>);

impl Drop for Restore {
    fn drop(&mut self) {
        // `try_with`: nothing to restore once the thread's locals are being destroyed.
        let previous = self.0.take();
        let _ = BACKEND.try_with(|b| *b.borrow_mut() = previous);
    }
}

/// Run `f` with `backend` answering this thread's cache reads and logs; the previously
/// installed backend (if any) is restored when `f` returns or unwinds.
#[cfg_attr(not(any(feature = "testing", feature = "embed")), allow(dead_code))]
pub(crate) fn with_backend<T>(backend: Rc<dyn Backend>, f: impl FnOnce() -> T) -> T {
    let _restore = Restore(BACKEND.with(|b| b.borrow_mut().replace(backend)));
    f()
}

fn current() -> Result<Rc<dyn Backend>, Error> {
    BACKEND.with(|b| b.borrow().clone()).ok_or(Error::NoHost)
}

fn record(m: Meta) -> MetaRecord {
    (m.metadata, m.fields)
}

pub(crate) fn cache_get(kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<String>, Error> {
    current()?.get(kind, namespace, name)
}

pub(crate) fn cache_list(kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<String>, Error> {
    current()?.list(kind, namespace, selector)
}

pub(crate) fn cache_by_index(kind: &KindRef, index: &str, value: &str) -> Result<Vec<String>, Error> {
    current()?.by_index(kind, index, value)
}

pub(crate) fn cache_get_meta(kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<MetaRecord>, Error> {
    Ok(current()?.get_meta(kind, namespace, name)?.map(record))
}

pub(crate) fn cache_list_meta(kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<MetaRecord>, Error> {
    Ok(current()?.list_meta(kind, namespace, selector)?.into_iter().map(record).collect())
}

pub(crate) fn cache_by_index_meta(kind: &KindRef, index: &str, value: &str) -> Result<Vec<MetaRecord>, Error> {
    Ok(current()?.by_index_meta(kind, index, value)?.into_iter().map(record).collect())
}

pub(crate) fn cache_list_meta_packed(kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<u8>, Error> {
    current()?.list_meta_packed(kind, namespace, selector)
}

pub(crate) fn cache_by_index_meta_packed(kind: &KindRef, index: &str, value: &str) -> Result<Vec<u8>, Error> {
    current()?.by_index_meta_packed(kind, index, value)
}

/// The installed backend's clock, else the system clock, in microseconds since the epoch.
pub(crate) fn now_micros() -> i64 {
    current().ok().and_then(|b| b.now_micros()).unwrap_or_else(crate::time::system_micros)
}

pub(crate) fn log(level: Level, message: &str) {
    match current() {
        Ok(b) => b.log(level, message),
        Err(_) => eprintln!("[{level:?}] {message}"),
    }
}
