package trainer

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/gotune/gotune/workers"
)

// How a checkpoint a worker hands over is taken over, whatever the kind of
// worker: only a folder inside the worker's own scratch folder (its
// GOTUNE_CHECKPOINT_DIR, rankScratch) is, as workers.Confine checks, and
// from then on only its real path is moved, copied or deleted. Anything
// else is refused: it stays where it is, untouched, an
// EventCheckpointRefused says why, and the report counts without a
// checkpoint. A report of several ranks whose checkpoint misses a refused
// shard commits no checkpoint.

// rankScratch is rank's own scratch folder in the attempt.
func (a *attempt) rankScratch(rank int) string {
	return fmt.Sprintf("%s-rank-%d", a.scratch, rank)
}

// confine is workers.Confine for a checkpoint a Go function of rank handed
// over in this process; a relative dir is relative to the current folder.
func (a *attempt) confine(rank int, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return workers.Confine(a.rankScratch(rank), abs)
}

// takeOver takes over dir, a checkpoint rank's process p handed over,
// through p.Fetch, which confines it (on the process's node). It returns
// the folder to commit, or "" with refused set when it was refused (the
// refusal is recorded). err is set instead, with nothing recorded, when
// the node was lost or the attempt is ending.
func (a *attempt) takeOver(rank int, p *workers.Process, dir string) (taken string, refused bool, err error) {
	taken, err = p.Fetch(a.ctx, dir)
	switch {
	case err == nil:
		return taken, false, nil
	case errors.Is(err, workers.ErrNodeLost) || a.ctx.Err() != nil:
		return "", false, err
	}
	p.Logf("warning: refused the checkpoint %s: %v", dir, err)
	a.refuse(rank, err)
	return "", true, nil
}

// maxRefusal bounds the reason recorded for a refused checkpoint, in
// bytes: it quotes the path a worker reported, which may be long.
const maxRefusal = 4096

// refuse tells the EventSink that rank's checkpoint was refused, and why.
// A sink that fails to record it fails the attempt.
func (a *attempt) refuse(rank int, why error) {
	if a.r.events == nil {
		return
	}
	reason := why.Error()
	if len(reason) > maxRefusal {
		reason = strings.ToValidUTF8(reason[:maxRefusal], "") + "…"
	}
	e := Event{Kind: EventCheckpointRefused, Time: time.Now(), Attempt: a.trialAttempt(), Workers: a.size(),
		Cause: fmt.Sprintf("worker %d: refused its checkpoint; the report counts without one: %s", rank, reason)}
	if err := a.r.events.Event(a.r.ctx, e); err != nil {
		a.fail(fmt.Errorf("trainer: record %s: %w", e.Kind, err))
	}
}
