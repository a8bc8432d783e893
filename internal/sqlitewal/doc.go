// Package sqlitewal registers a SQLite VFS, Name, that writes each WAL
// commit to the file with one write(2) (up to 128 KiB) instead of two a
// frame.
//
// SQLite's default VFS hands every WAL frame to the kernel as two pwrite
// calls, its 24-byte header and then its page (wal.c walWriteOneFrame),
// and a commit of a group of submissions writes a few dozen frames. With
// synchronous=NORMAL nothing is fsynced at commit, so those calls are most
// of what a commit costs: counted with perf in `edgepipe bench api`, 4.1
// pwrite calls a submission, all to the WAL; through this VFS, 0.44.
//
// This VFS is the default one with a layer on WAL files: consecutive
// writes are kept in a buffer and written together when the page of the
// commit frame arrives (the frame whose header carries the database size,
// wal.c walEncodeFrame), before any other call on the WAL file, when the
// buffer would pass the most the default VFS writes at once, and — seen
// through the connection's main database file, its only other wrapped
// file — when the connection publishes a commit (xShmBarrier) or gives up
// the WAL write lock. That last point is the invariant: nothing stays
// buffered once the connection no longer holds the write lock, so no other
// connection or process can write or truncate the WAL under bytes kept
// here (TestRollbackLeavesNothingBehind shows the corruption without it).
// SQLite returns from COMMIT only after the commit frame's write returned,
// so a process killed right after a commit keeps it
// (TestKilledRightAfterCommit), and readers see every frame a published
// commit names (TestReadersDuringCommits). A write that fails fails the
// SQLite call that wrote or flushed, as without the layer; a rewrite of a
// frame header SQLite just read (walRewriteChecksums) is written at once.
//
// The C code (walvfs.c) uses the SQLite that github.com/mattn/go-sqlite3
// links into the program; Register fails if it is not there.
package sqlitewal
