package sqlitewal

/*
#include "walvfs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"

	_ "github.com/mattn/go-sqlite3" // the SQLite this VFS sits in
)

// Name is the VFS's name, for a DSN's vfs parameter.
const Name = "edgepipe-wal"

var (
	once   sync.Once
	regErr error
	cName  = C.CString(Name) // SQLite keeps the pointer for the process's life
)

// ErrUnavailable means the VFS could not be registered.
var ErrUnavailable = errors.New("sqlitewal: cannot register the VFS")

// Register registers the VFS once; every later call returns the first
// call's result.
func Register() error {
	once.Do(func() {
		if rc := C.edgepipe_wal_register(cName); rc != 0 {
			regErr = fmt.Errorf("%w (SQLite code %d)", ErrUnavailable, int(rc))
		}
	})
	return regErr
}

// Counts reports, for every WAL file the process wrote through the VFS,
// how many writes SQLite asked for and how many reached the files.
func Counts() (asked, written int64) {
	var a, w C.sqlite3_int64
	C.edgepipe_wal_counts(&a, &w)
	return int64(a), int64(w)
}
