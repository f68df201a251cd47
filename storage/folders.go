package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrReadOnlyFolder is wrapped by the error of an Open, a lock or a
// checkpoint folder that failed because a folder it must write in cannot
// be written: it is on a read-only file system, or this user has no
// permission to write there. The error names the folder.
var ErrReadOnlyFolder = errors.New("read-only folder")

// folderError explains err, a failure to create or write something in
// folder dir. When dir (or the nearest folder above it that exists) cannot
// be written, it returns an error that names that folder, says why and
// wraps both ErrReadOnlyFolder and err (which may be nil: a check before
// writing); when dir is not a folder, it says so. Otherwise it returns nil.
func folderError(dir string, err error) error {
	at := dir
	for {
		fi, serr := os.Stat(at)
		if serr == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s is not a folder%s", at, because(err))
			}
			break
		}
		if !errors.Is(serr, fs.ErrNotExist) {
			return nil
		}
		up := filepath.Dir(at)
		if up == at {
			return nil
		}
		at = up
	}
	const wOK = 2 // access(2)'s W_OK
	aerr := syscall.Access(at, wOK)
	if abs, err := filepath.Abs(at); err == nil {
		at = abs
	}
	switch {
	case errors.Is(aerr, syscall.EROFS):
		return fmt.Errorf("%w: %s is on a read-only file system%s", ErrReadOnlyFolder, at, because(err))
	case errors.Is(aerr, syscall.EACCES), errors.Is(aerr, syscall.EPERM):
		return fmt.Errorf("%w: %s is read-only for this user, who may not write in it%s", ErrReadOnlyFolder, at, because(err))
	}
	return nil
}

// because is err's text in brackets after a space, or "" for no error.
func because(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

// orFolderError is folderError's explanation of err when it has one, else
// err.
func orFolderError(dir string, err error) error {
	if fe := folderError(dir, err); fe != nil {
		return fe
	}
	return err
}
