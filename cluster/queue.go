package cluster

import (
	"io"
	"sync"
)

// queue is an unbounded FIFO: push never blocks, so a goroutine that
// receives from the network can hand items to slower consumers without
// holding up the others.
type queue[T any] struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []T
	closed bool
}

func newQueue[T any]() *queue[T] {
	q := &queue[T]{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// push adds v; after close it is dropped.
func (q *queue[T]) push(v T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.items = append(q.items, v)
	q.cond.Signal()
}

// pop waits for the next item; ok is false once the queue is closed and
// empty.
func (q *queue[T]) pop() (v T, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return v, false
	}
	v = q.items[0]
	var zero T
	q.items[0] = zero
	q.items = q.items[1:]
	return v, true
}

// close ends the queue: pop returns what is left, then ok false.
func (q *queue[T]) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}

// bufPipe is the reading end of a byte stream fed by another goroutine
// that must never block on the reader: what is written waits in memory.
type bufPipe struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	closed bool // no more writes: Read returns io.EOF once buf is empty
	gone   bool // the reader closed: Read fails, writes are dropped
}

func newBufPipe() *bufPipe {
	p := &bufPipe{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *bufPipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.buf) == 0 && !p.closed && !p.gone {
		p.cond.Wait()
	}
	if p.gone {
		return 0, io.ErrClosedPipe
	}
	if len(p.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.buf)
	p.buf = p.buf[n:]
	return n, nil
}

// feed appends data for the reader.
func (p *bufPipe) feed(data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.gone {
		return
	}
	p.buf = append(p.buf, data...)
	p.cond.Broadcast()
}

// closeWrite ends the stream: the reader sees io.EOF after the data.
func (p *bufPipe) closeWrite() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.cond.Broadcast()
}

// closeRead makes reads fail at once.
func (p *bufPipe) closeRead() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gone = true
	p.buf = nil
	p.cond.Broadcast()
}
