package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// DeleteExperiment removes experiment name and everything recorded of it
// (its trials, reports, checkpoint records, events, workers, samples,
// scheduler inputs and deliveries) in one transaction. It fails with
// ErrNotFound when there is no such experiment. The files of its trials
// are the caller's to remove; hold the experiment's lock (LockExperiment)
// so that no run writes it meanwhile.
func (db *DB) DeleteExperiment(ctx context.Context, name string) error {
	err := db.write(ctx, func(tx *wtx) error {
		var id int64
		err := tx.queryRow(`SELECT id FROM experiments WHERE name = ?`, name).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		// Every table that refers to an experiment or a trial, whatever
		// the schema version added, in any order: the references are
		// checked at the commit.
		if _, err := tx.exec(`PRAGMA defer_foreign_keys = ON`); err != nil {
			return err
		}
		rows, err := tx.tx.QueryContext(ctx, `
SELECT m.name, max(c.name = 'experiment_id') FROM sqlite_master m, pragma_table_info(m.name) c
WHERE m.type = 'table' AND m.name NOT IN ('experiments', 'trials') AND c.name IN ('experiment_id', 'trial_id')
GROUP BY m.name ORDER BY m.name`)
		if err != nil {
			return err
		}
		type table struct {
			name    string
			byTrial bool
		}
		var tables []table
		for rows.Next() {
			var t table
			var byExperiment bool
			if err := rows.Scan(&t.name, &byExperiment); err != nil {
				rows.Close()
				return err
			}
			t.byTrial = !byExperiment
			tables = append(tables, t)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		for _, t := range tables {
			q := `DELETE FROM "` + t.name + `" WHERE experiment_id = ?`
			if t.byTrial {
				q = `DELETE FROM "` + t.name + `" WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id = ?)`
			}
			if _, err := tx.tx.ExecContext(ctx, q, id); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
		}
		if _, err := tx.exec(`DELETE FROM trials WHERE experiment_id = ?`, id); err != nil {
			return err
		}
		_, err = tx.exec(`DELETE FROM experiments WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete experiment %q: %w", name, err)
	}
	return nil
}
