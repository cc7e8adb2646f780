package main

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// disks puts node data dirs on small tmpfs mounts that the disk-full
// scenario fills up.
type disks struct {
	mu     sync.Mutex
	mounts []string // guarded by mu
}

const diskSize = "size=48m"

func (d *disks) mount(_ int, dir string) error {
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, diskSize+",mode=0700"); err != nil {
		return err
	}
	d.mu.Lock()
	d.mounts = append(d.mounts, dir)
	d.mu.Unlock()
	return nil
}

func filler(dir string) string { return filepath.Join(dir, "chaos-filler") }

// fill writes a file into dir until its filesystem has no space left.
func (d *disks) fill(dir string) error {
	f, err := os.OpenFile(filler(dir), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			return err
		}
	}
	for _, n := range []int{64 << 10, 4 << 10, 512} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
	return nil
}

func (d *disks) free(dir string) { _ = os.Remove(filler(dir)) }

func (d *disks) freeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.mounts {
		d.free(m)
	}
}

func (d *disks) unmountAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.mounts {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	d.mounts = nil
}
