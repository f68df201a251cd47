package allreduce

import (
	"context"
	"errors"
	"testing"
)

func TestLocalRepeatedCollectives(t *testing.T) {
	comms := NewLocal(4)
	each(t, comms, "step", func(c Comm) error {
		for step := range 200 {
			buf := []float64{float64(c.Rank() + step)}
			if err := c.AllReduceFloat64(context.Background(), buf, Sum); err != nil {
				return err
			}
			if want := float64(0 + 1 + 2 + 3 + 4*step); buf[0] != want {
				return errors.New("wrong sum")
			}
			if err := c.Barrier(context.Background()); err != nil {
				return err
			}
		}
		return nil
	})
}

func TestNewLocalRejectsEmptyGroup(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewLocal(0) did not panic")
		}
	}()
	NewLocal(0)
}

func TestSegmentCoversRange(t *testing.T) {
	for n := range 20 {
		for size := 1; size <= 6; size++ {
			next := 0
			for r := range size {
				lo, hi := segment(n, size, r)
				if lo != next || hi < lo {
					t.Fatalf("segment(%d, %d, %d) = [%d, %d), want start %d", n, size, r, lo, hi, next)
				}
				next = hi
			}
			if next != n {
				t.Fatalf("segments of %d over %d ranks end at %d", n, size, next)
			}
		}
	}
}
