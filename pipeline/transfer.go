package pipeline

// The row-level door through which a whole job store is copied to another
// (edgepipe export / import, storage/transfer). The drivers move rows; the
// file format, the order of tables and the policy (an import only into an
// empty store, every row accounted for) belong to storage/transfer. The
// types live here because every driver uses them and drivers import only
// this package.

// TransferTable is one table of a job store.
type TransferTable struct {
	Name string
	// Columns in the store's order.
	Columns []string
	// Rows is the table's row count (import: before anything is written;
	// export: not counted, 0).
	Rows int64
}

// TransferStore describes the store at the other end of a transfer.
type TransferStore struct {
	Driver        string // "sqlite" or "postgres"
	SchemaVersion int
	// Tables is every table of the store except its migration bookkeeping.
	Tables []TransferTable
}

// ExportParams drives a store's ExportRows. Values are nil, int64 or
// string (JSON columns as their text).
type ExportParams struct {
	// Tables to read, in this order. Each must exist.
	Tables []string
	// Begin is called first, inside the snapshot every row is read from.
	Begin func(src TransferStore) error
	// Row is called for each row, values in the order of its table's
	// Columns.
	Row func(table string, values []any) error
	// End is called after the last row with the last value each table's
	// id sequence handed out (a table without one is absent).
	End func(sequences map[string]int64) error
}

// ImportParams drives a store's ImportRows, which writes every row in one
// transaction and commits only if End succeeds.
type ImportParams struct {
	// Begin is called inside the transaction, before anything is written,
	// with the target's tables and their current row counts; an error
	// aborts the import.
	Begin func(dst TransferStore) error
	// Next returns the next row to insert (rows of one table come
	// together, tables in dependency order) and io.EOF after the last.
	Next func() (table string, columns []string, values []any, err error)
	// End is called after Next returned io.EOF; it returns the sequence
	// values to carry over. Every id sequence is then set past both that
	// value and the largest imported id.
	End func() (sequences map[string]int64, err error)
}
