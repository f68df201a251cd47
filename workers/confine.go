package workers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrOutsideScratch is wrapped by the error of Confine, and so of
// Process.Fetch, for a handed-over folder that is not inside the process's
// own scratch folder.
var ErrOutsideScratch = errors.New("only a folder inside the worker's own scratch folder (its GOTUNE_CHECKPOINT_DIR) is taken over")

// Confine is the one check every take-over of a folder a worker hands over
// (a checkpoint) passes, on the launching node and on a node agent alike:
// dir, an absolute path, must name a folder strictly inside root, the
// worker's own scratch folder (its GOTUNE_CHECKPOINT_DIR, absolute too: a
// relative root is refused rather than compared with dir), once every
// symbolic link and ".." in either is resolved. Root itself is refused
// (taking it over would take the worker's scratch folder away), and so is
// a path that is a symbolic link or passes through one to anywhere
// outside root. It returns dir's real path, which is what the caller must
// move, copy or delete from then on, so that nothing outside root is ever
// touched. An error that wraps ErrOutsideScratch says where dir leads;
// others say why dir cannot be read.
//
// Files and links inside the folder are not followed by the take-over: a
// link is moved, copied or deleted as a link, so a link to a place outside
// root leaves that place alone.
func Confine(root, dir string) (string, error) {
	if root == "" {
		return "", fmt.Errorf("%s: the worker has no scratch folder to hand folders over from: %w", dir, ErrOutsideScratch)
	}
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("%s: the worker's scratch folder %s is not an absolute path", dir, root)
	}
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%s: not an absolute path", dir)
	}
	// A scratch folder is made when the worker first asks for a folder in
	// it: a worker that never did has nothing it may hand over, and any
	// folder that exists is outside it.
	realRoot, rootErr := filepath.EvalSymlinks(root)
	if rootErr != nil && !errors.Is(rootErr, fs.ErrNotExist) {
		return "", fmt.Errorf("the worker's scratch folder: %w", rootErr)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil || rootErr != nil {
		if rel, rerr := filepath.Rel(filepath.Clean(root), filepath.Clean(dir)); rerr != nil || !filepath.IsLocal(rel) || err == nil {
			return "", fmt.Errorf("%s is outside the worker's scratch folder %s: %w", dir, root, ErrOutsideScratch)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s: no such folder: %w", dir, err)
		}
		return "", err
	}
	where := ""
	if real != filepath.Clean(dir) {
		where = " (it resolves to " + real + ")"
	}
	rel, err := filepath.Rel(realRoot, real)
	switch {
	case err == nil && rel == ".":
		return "", fmt.Errorf("%s%s is the worker's scratch folder itself, not a folder inside it: %w", dir, where, ErrOutsideScratch)
	case err != nil || !filepath.IsLocal(rel):
		return "", fmt.Errorf("%s%s is outside the worker's scratch folder %s: %w", dir, where, root, ErrOutsideScratch)
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s%s is not a folder", dir, where)
	}
	return real, nil
}
