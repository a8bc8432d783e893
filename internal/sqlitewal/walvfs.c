/*
** A VFS over SQLite's default one ("unix") that writes each WAL commit
** with one write(2) (up to 128 KiB) instead of two per frame. doc.go says
** why; how, and why it is safe:
**
** SQLite appends a frame as its 24-byte header and then its page, back to
** back at consecutive offsets (wal.c walWriteOneFrame). This layer keeps
** appended frames — a header at a frame's offset, and the page right after
** a kept header — in a buffer and hands them to the file underneath in one
** write when
**   - the page of a commit frame arrives (a frame header whose "database
**     size" field is not 0, wal.c walEncodeFrame): the commit is whole;
**   - any other call reaches the WAL file (read, sync, truncate, size,
**     lock, file control, close), or any other write (not the next byte,
**     or not a frame header or its page: those go through at once; a
**     24-byte write is taken for a frame header only at a frame's offset
**     once the page size is known, from the WAL header or the first page,
**     and never right after a read);
**   - a frame would take the buffer past 128 KiB - 1, the most the default
**     VFS writes at once (os_unix.c seekAndWriteFd);
**   - the connection, through its main database file, gives up the WAL
**     write lock (xShmLock unlock of lock 0, WAL_WRITE_LOCK) or its file
**     lock (xUnlock: how locking_mode=EXCLUSIVE ends, where the WAL locks
**     are not taken through xShmLock).
** The last point is the invariant: nothing stays buffered once the
** connection no longer holds the write lock, so no other connection or
** process can write or truncate the WAL under bytes kept here. What those
** flushes write are frames of a transaction that did not commit (the
** commit frame's page flushes at once), so the error they cannot report
** loses nothing. A frame header rewritten right after a read of its frame
** (walRewriteChecksums) goes through at once, so its error is the
** caller's. SQLite returns from COMMIT only after the commit frame's write
** returned, so a process killed after a commit keeps it, as without this
** layer.
**
** Only WAL files (and, to see those calls, main database files) are
** wrapped; every other file is the default VFS's own, untouched.
*/
#include <stdlib.h>
#include <string.h>
#include "walvfs.h"

/* The SQLite functions this file calls, defined by the SQLite that
** github.com/mattn/go-sqlite3 links in. Weak, so that cgo's per-package
** test link (which has no SQLite) succeeds; the program's link binds them. */
extern sqlite3_vfs *sqlite3_vfs_find(const char *) __attribute__((weak));
extern int sqlite3_vfs_register(sqlite3_vfs *, int) __attribute__((weak));
extern sqlite3_file *sqlite3_database_file_object(const char *) __attribute__((weak));

#define WAL_HDRSIZE 32
#define WAL_FRAME_HDRSIZE 24
#define WAL_WRITE_LOCK 0
#define WRITE_MAX 0x1ffff

typedef struct DbFile DbFile;

typedef struct WalFile {
  sqlite3_file base;    /* this layer's methods */
  sqlite3_file *real;   /* the default VFS's file, right after this struct */
  DbFile *db;           /* its database file; NULL: nothing is buffered */
  char *buf;            /* writes not yet handed down, contiguous (WRITE_MAX bytes) */
  int len;
  sqlite3_int64 off;    /* file offset of buf[0] */
  int header;           /* the last write was a frame header, kept */
  int commitNext;       /* ... and that of a commit frame */
  int szPage;           /* the page size, from the WAL header or the first page kept (0: not yet known) */
  int afterOther;       /* the last call on the file was not a write */
  int afterRead;        /* ... and was a read */
} WalFile;

struct DbFile {
  sqlite3_file base;
  sqlite3_file *real;
  WalFile *wal;         /* the connection's open WAL file, if any */
};

static sqlite3_vfs *dflt;      /* the VFS underneath */
static sqlite3_vfs walVfs;     /* this one */
static sqlite3_int64 nAsked, nWritten;  /* counters (relaxed atomics) */

static int writeDown(WalFile *p, const void *z, int n, sqlite3_int64 off) {
  __atomic_add_fetch(&nWritten, 1, __ATOMIC_RELAXED);
  return p->real->pMethods->xWrite(p->real, z, n, off);
}

static int flush(WalFile *p) {
  int rc = SQLITE_OK;
  if (p->len > 0) {
    rc = writeDown(p, p->buf, p->len, p->off);
    p->len = 0;
  }
  p->header = p->commitNext = 0;
  return rc;
}

/* bigEndian32 reads a big-endian field of a WAL or frame header. */
static unsigned int bigEndian32(const unsigned char *b) {
  return ((unsigned int)b[0] << 24) | ((unsigned int)b[1] << 16) | ((unsigned int)b[2] << 8) | b[3];
}

/* pageSize is n if it can be a SQLite page size, else 0. */
static int pageSize(unsigned int n) {
  return n >= 512 && n <= 65536 && (n & (n - 1)) == 0 ? (int)n : 0;
}

static int walWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 off) {
  WalFile *p = (WalFile *)f;
  int rc;
  int afterOther = p->afterOther, afterRead = p->afterRead;
  int header = p->header;        /* the last write was a frame header, kept */
  int commit = p->commitNext;    /* ... that of a commit frame */
  p->afterOther = p->afterRead = p->header = p->commitNext = 0;
  __atomic_add_fetch(&nAsked, 1, __ATOMIC_RELAXED);
  if (p->len > 0 && (off != p->off + p->len || p->len + n > WRITE_MAX)) {
    /* Not the next byte, or more than one write can carry: what is kept
    ** goes first. */
    if ((rc = flush(p)) != SQLITE_OK) return rc;
  }
  if (off == 0 && n >= 12) {
    /* The WAL header names the page size (wal.c: 1 for 65536). */
    unsigned int sz = bigEndian32((const unsigned char *)z + 8);
    int ps = pageSize(sz == 1 ? 65536 : sz);
    if (ps) p->szPage = ps;
  }
  /* Only frames are kept: a frame header (at a frame's offset once the
  ** page size is known; before that, only right after another write), and
  ** the page right after a kept header. Anything else goes through at
  ** once, so that its error is its caller's: the WAL header, a page
  ** rewritten in place, a frame header rewritten right after a read of
  ** its frame (walRewriteChecksums), the rest of a write split around a
  ** sync point (24 bytes of it are not at a frame's offset), any write
  ** while no database file can flush at unlock. */
  if (p->db && !afterRead && n == WAL_FRAME_HDRSIZE
      && (p->szPage ? off >= WAL_HDRSIZE && (off - WAL_HDRSIZE) % (WAL_FRAME_HDRSIZE + p->szPage) == 0 : !afterOther)) {
    if (p->len > 0 && p->len + n + p->szPage > WRITE_MAX) {
      /* Keep a header and its page in one write. */
      if ((rc = flush(p)) != SQLITE_OK) return rc;
    }
    if (p->buf || (p->buf = malloc(WRITE_MAX))) {
      if (p->len == 0) p->off = off;
      memcpy(p->buf + p->len, z, n);
      p->len += n;
      p->header = 1;
      p->commitNext = bigEndian32((const unsigned char *)z + 4) != 0;
      return SQLITE_OK;
    }
  } else if (header && p->len > 0) {
    memcpy(p->buf + p->len, z, n); /* contiguous and fits: checked above */
    p->len += n;
    if (!p->szPage) p->szPage = pageSize((unsigned int)n);
    if (commit) return flush(p); /* the commit frame's page: the commit is whole */
    return SQLITE_OK;
  }
  if ((rc = flush(p)) != SQLITE_OK) return rc;
  return writeDown(p, z, n, off);
}

/* Every other call on a WAL file hands the buffered writes down first. */
#define FLUSHED(p) do { int rc_ = flush(p); if (rc_ != SQLITE_OK) return rc_; } while (0)
#define WAL(f) WalFile *p = (WalFile *)(f); p->afterOther = 1

static int walClose(sqlite3_file *f) {
  WalFile *p = (WalFile *)f;
  int rc = flush(p), rc2 = p->real->pMethods->xClose(p->real);
  if (p->db) p->db->wal = 0;
  free(p->buf);
  p->buf = 0;
  return rc != SQLITE_OK ? rc : rc2;
}
static int walRead(sqlite3_file *f, void *z, int n, sqlite3_int64 off) {
  WAL(f); FLUSHED(p); p->afterRead = 1; return p->real->pMethods->xRead(p->real, z, n, off);
}
static int walTruncate(sqlite3_file *f, sqlite3_int64 size) {
  WAL(f); FLUSHED(p); return p->real->pMethods->xTruncate(p->real, size);
}
static int walSync(sqlite3_file *f, int flags) {
  WAL(f); FLUSHED(p); return p->real->pMethods->xSync(p->real, flags);
}
static int walFileSize(sqlite3_file *f, sqlite3_int64 *size) {
  WAL(f); FLUSHED(p); return p->real->pMethods->xFileSize(p->real, size);
}
static int walLock(sqlite3_file *f, int l) {
  WAL(f); FLUSHED(p); return p->real->pMethods->xLock(p->real, l);
}
static int walUnlock(sqlite3_file *f, int l) {
  WAL(f); FLUSHED(p); return p->real->pMethods->xUnlock(p->real, l);
}
static int walCheckReservedLock(sqlite3_file *f, int *out) {
  WAL(f); FLUSHED(p); return p->real->pMethods->xCheckReservedLock(p->real, out);
}
static int walFileControl(sqlite3_file *f, int op, void *arg) {
  WAL(f); FLUSHED(p); return p->real->pMethods->xFileControl(p->real, op, arg);
}
static int walSectorSize(sqlite3_file *f) {
  WalFile *p = (WalFile *)f; return p->real->pMethods->xSectorSize(p->real);
}
static int walDeviceCharacteristics(sqlite3_file *f) {
  WalFile *p = (WalFile *)f; return p->real->pMethods->xDeviceCharacteristics(p->real);
}
static int walShmMap(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **pp) {
  WAL(f); FLUSHED(p); return p->real->pMethods->xShmMap(p->real, pg, pgsz, extend, pp);
}
static int walShmLock(sqlite3_file *f, int offset, int n, int flags) {
  WAL(f); FLUSHED(p); return p->real->pMethods->xShmLock(p->real, offset, n, flags);
}
static void walShmBarrier(sqlite3_file *f) {
  WAL(f); (void)flush(p); p->real->pMethods->xShmBarrier(p->real);
}
static int walShmUnmap(sqlite3_file *f, int del) {
  WAL(f); FLUSHED(p); return p->real->pMethods->xShmUnmap(p->real, del);
}
static int walFetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp) {
  WAL(f); FLUSHED(p); return p->real->pMethods->xFetch(p->real, off, n, pp);
}
static int walUnfetch(sqlite3_file *f, sqlite3_int64 off, void *pp) {
  WAL(f); FLUSHED(p); return p->real->pMethods->xUnfetch(p->real, off, pp);
}

static const sqlite3_io_methods walMethods = {
  3, walClose, walRead, walWrite, walTruncate, walSync, walFileSize, walLock, walUnlock,
  walCheckReservedLock, walFileControl, walSectorSize, walDeviceCharacteristics,
  walShmMap, walShmLock, walShmBarrier, walShmUnmap, walFetch, walUnfetch,
};

/* The main database file: the default VFS's, plus the two points where
** the connection's WAL buffer must be empty. (Not xShmBarrier, where a
** commit is published: the commit frame's page was written before.) */
#define DB(f) DbFile *d = (DbFile *)(f)

static int dbClose(sqlite3_file *f) {
  DB(f);
  if (d->wal) d->wal->db = 0;
  return d->real->pMethods->xClose(d->real);
}
static int dbRead(sqlite3_file *f, void *z, int n, sqlite3_int64 off) { DB(f); return d->real->pMethods->xRead(d->real, z, n, off); }
static int dbWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 off) { DB(f); return d->real->pMethods->xWrite(d->real, z, n, off); }
static int dbTruncate(sqlite3_file *f, sqlite3_int64 size) { DB(f); return d->real->pMethods->xTruncate(d->real, size); }
static int dbSync(sqlite3_file *f, int flags) { DB(f); return d->real->pMethods->xSync(d->real, flags); }
static int dbFileSize(sqlite3_file *f, sqlite3_int64 *size) { DB(f); return d->real->pMethods->xFileSize(d->real, size); }
static int dbLock(sqlite3_file *f, int l) { DB(f); return d->real->pMethods->xLock(d->real, l); }
static int dbUnlock(sqlite3_file *f, int l) {
  /* In locking_mode=EXCLUSIVE the WAL locks are never taken or given up
  ** through xShmLock: leaving that mode ends with this call instead. */
  DB(f);
  int rc = d->wal ? flush(d->wal) : SQLITE_OK, rc2 = d->real->pMethods->xUnlock(d->real, l);
  return rc != SQLITE_OK ? rc : rc2;
}
static int dbCheckReservedLock(sqlite3_file *f, int *out) { DB(f); return d->real->pMethods->xCheckReservedLock(d->real, out); }
static int dbFileControl(sqlite3_file *f, int op, void *arg) { DB(f); return d->real->pMethods->xFileControl(d->real, op, arg); }
static int dbSectorSize(sqlite3_file *f) { DB(f); return d->real->pMethods->xSectorSize(d->real); }
static int dbDeviceCharacteristics(sqlite3_file *f) { DB(f); return d->real->pMethods->xDeviceCharacteristics(d->real); }
static int dbShmMap(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **pp) {
  DB(f); return d->real->pMethods->xShmMap(d->real, pg, pgsz, extend, pp);
}
static int dbShmLock(sqlite3_file *f, int offset, int n, int flags) {
  DB(f);
  int rc = SQLITE_OK, rc2;
  if ((flags & SQLITE_SHM_UNLOCK) && offset <= WAL_WRITE_LOCK && offset + n > WAL_WRITE_LOCK && d->wal) {
    rc = flush(d->wal); /* before anyone else can take the write lock */
  }
  rc2 = d->real->pMethods->xShmLock(d->real, offset, n, flags);
  return rc != SQLITE_OK ? rc : rc2;
}
static void dbShmBarrier(sqlite3_file *f) { DB(f); d->real->pMethods->xShmBarrier(d->real); }
static int dbShmUnmap(sqlite3_file *f, int del) { DB(f); return d->real->pMethods->xShmUnmap(d->real, del); }
static int dbFetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp) { DB(f); return d->real->pMethods->xFetch(d->real, off, n, pp); }
static int dbUnfetch(sqlite3_file *f, sqlite3_int64 off, void *pp) { DB(f); return d->real->pMethods->xUnfetch(d->real, off, pp); }

static const sqlite3_io_methods dbMethods = {
  3, dbClose, dbRead, dbWrite, dbTruncate, dbSync, dbFileSize, dbLock, dbUnlock,
  dbCheckReservedLock, dbFileControl, dbSectorSize, dbDeviceCharacteristics,
  dbShmMap, dbShmLock, dbShmBarrier, dbShmUnmap, dbFetch, dbUnfetch,
};

/* The real file sits after this layer's struct, 16-byte aligned from the
** start of the sqlite3_file SQLite allocated (which is 8-byte aligned). */
#define ALIGNED(n) (((n) + 15) & ~(size_t)15)
#define REAL_OFFSET ALIGNED(sizeof(WalFile) > sizeof(DbFile) ? sizeof(WalFile) : sizeof(DbFile))

static int vfsOpen(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *outFlags) {
  sqlite3_file *real = (sqlite3_file *)((char *)f + REAL_OFFSET);
  int rc;
  (void)vfs;
  if (!(flags & (SQLITE_OPEN_WAL | SQLITE_OPEN_MAIN_DB))) {
    /* Neither: the default VFS's file as it is, with its methods. */
    return dflt->xOpen(dflt, name, f, flags, outFlags);
  }
  memset(f, 0, REAL_OFFSET);
  rc = dflt->xOpen(dflt, name, real, flags, outFlags);
  if (rc != SQLITE_OK) return rc; /* f->pMethods is NULL: nothing to close */
  if (!real->pMethods || real->pMethods->iVersion < 3) {
    if (real->pMethods) real->pMethods->xClose(real);
    return SQLITE_ERROR; /* not the default VFS this was written against */
  }
  if (flags & SQLITE_OPEN_MAIN_DB) {
    DbFile *d = (DbFile *)f;
    d->real = real;
    d->base.pMethods = &dbMethods;
  } else {
    WalFile *p = (WalFile *)f;
    sqlite3_file *db = sqlite3_database_file_object ? sqlite3_database_file_object(name) : 0;
    p->real = real;
    if (db && db->pMethods == &dbMethods) {
      /* Buffer only when the unlock can flush (see the invariant above). */
      p->db = (DbFile *)db;
      p->db->wal = p;
    }
    p->base.pMethods = &walMethods;
  }
  return SQLITE_OK;
}

/* Everything else is the default VFS's, called with its own vfs pointer. */
static int vfsDelete(sqlite3_vfs *v, const char *n, int s) { (void)v; return dflt->xDelete(dflt, n, s); }
static int vfsAccess(sqlite3_vfs *v, const char *n, int fl, int *o) { (void)v; return dflt->xAccess(dflt, n, fl, o); }
static int vfsFullPathname(sqlite3_vfs *v, const char *n, int no, char *o) { (void)v; return dflt->xFullPathname(dflt, n, no, o); }
static void *vfsDlOpen(sqlite3_vfs *v, const char *n) { (void)v; return dflt->xDlOpen(dflt, n); }
static void vfsDlError(sqlite3_vfs *v, int n, char *m) { (void)v; dflt->xDlError(dflt, n, m); }
static void (*vfsDlSym(sqlite3_vfs *v, void *h, const char *s))(void) { (void)v; return dflt->xDlSym(dflt, h, s); }
static void vfsDlClose(sqlite3_vfs *v, void *h) { (void)v; dflt->xDlClose(dflt, h); }
static int vfsRandomness(sqlite3_vfs *v, int n, char *o) { (void)v; return dflt->xRandomness(dflt, n, o); }
static int vfsSleep(sqlite3_vfs *v, int us) { (void)v; return dflt->xSleep(dflt, us); }
static int vfsCurrentTime(sqlite3_vfs *v, double *t) { (void)v; return dflt->xCurrentTime(dflt, t); }
static int vfsGetLastError(sqlite3_vfs *v, int n, char *o) { (void)v; return dflt->xGetLastError(dflt, n, o); }
static int vfsCurrentTimeInt64(sqlite3_vfs *v, sqlite3_int64 *t) { (void)v; return dflt->xCurrentTimeInt64(dflt, t); }
static int vfsSetSystemCall(sqlite3_vfs *v, const char *n, sqlite3_syscall_ptr f) { (void)v; return dflt->xSetSystemCall(dflt, n, f); }
static sqlite3_syscall_ptr vfsGetSystemCall(sqlite3_vfs *v, const char *n) { (void)v; return dflt->xGetSystemCall(dflt, n); }
static const char *vfsNextSystemCall(sqlite3_vfs *v, const char *n) { (void)v; return dflt->xNextSystemCall(dflt, n); }

int edgepipe_wal_register(const char *zName) {
  sqlite3_vfs *d;
  if (!sqlite3_vfs_find || !sqlite3_vfs_register || !sqlite3_database_file_object) return SQLITE_ERROR;
  if (dflt) return SQLITE_OK;
  d = sqlite3_vfs_find(0);
  if (!d || d->iVersion < 3) return SQLITE_ERROR;
  dflt = d;
  walVfs.iVersion = 3;
  walVfs.szOsFile = (int)REAL_OFFSET + d->szOsFile;
  walVfs.mxPathname = d->mxPathname;
  walVfs.zName = zName;
  walVfs.xOpen = vfsOpen;
  walVfs.xDelete = vfsDelete;
  walVfs.xAccess = vfsAccess;
  walVfs.xFullPathname = vfsFullPathname;
  walVfs.xDlOpen = vfsDlOpen;
  walVfs.xDlError = vfsDlError;
  walVfs.xDlSym = vfsDlSym;
  walVfs.xDlClose = vfsDlClose;
  walVfs.xRandomness = vfsRandomness;
  walVfs.xSleep = vfsSleep;
  walVfs.xCurrentTime = vfsCurrentTime;
  walVfs.xGetLastError = vfsGetLastError;
  walVfs.xCurrentTimeInt64 = vfsCurrentTimeInt64;
  walVfs.xSetSystemCall = vfsSetSystemCall;
  walVfs.xGetSystemCall = vfsGetSystemCall;
  walVfs.xNextSystemCall = vfsNextSystemCall;
  return sqlite3_vfs_register(&walVfs, 0);
}

void edgepipe_wal_counts(sqlite3_int64 *asked, sqlite3_int64 *written) {
  *asked = __atomic_load_n(&nAsked, __ATOMIC_RELAXED);
  *written = __atomic_load_n(&nWritten, __ATOMIC_RELAXED);
}
