package app

import (
	"context"
	"io"
	"log/slog"
	"time"

	"edgepipe/storage/transfer"
)

// Export writes the configured job store whole to w (edgepipe export).
func Export(ctx context.Context, cfg Config, log *slog.Logger, w io.Writer) (transfer.Summary, error) {
	st, err := openJobStore(ctx, cfg, log)
	if err != nil {
		return transfer.Summary{}, err
	}
	defer st.Close()
	return transfer.Export(ctx, st, w, time.Now())
}

// Import writes an export into the configured job store, which must be
// empty (edgepipe import). The store is migrated first, as on every open.
func Import(ctx context.Context, cfg Config, log *slog.Logger, r io.Reader) (transfer.Summary, error) {
	st, err := openJobStore(ctx, cfg, log)
	if err != nil {
		return transfer.Summary{}, err
	}
	defer st.Close()
	return transfer.Import(ctx, st, r)
}
