/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Intrusive doubly linked lists, after systemd's src/basic/list.h: an object that is on a list
 * named `name` has LIST_FIELDS(type, name) (name_next, name_prev), and the list is a pointer to
 * its first object. Removal is O(1), and LIST_FOREACH allows removing (freeing) the current
 * object. */
#pragma once

#include <assert.h>
#include <stddef.h>

#define LIST_FIELDS(t, name) t *name##_next, *name##_prev

/* Puts item at the front of the list; returns item. */
#define LIST_PREPEND(name, head, item)                              \
	({                                                          \
		typeof(*(head)) **_head = &(head), *_item = (item); \
		assert(_item);                                      \
		if ((_item->name##_next = *_head))                  \
			_item->name##_next->name##_prev = _item;    \
		_item->name##_prev = NULL;                          \
		*_head = _item;                                     \
		_item;                                              \
	})

/* Takes item off the list it is on; returns item. */
#define LIST_REMOVE(name, head, item)                                         \
	({                                                                    \
		typeof(*(head)) **_head = &(head), *_item = (item);           \
		assert(_item);                                                \
		if (_item->name##_next)                                       \
			_item->name##_next->name##_prev = _item->name##_prev; \
		if (_item->name##_prev)                                       \
			_item->name##_prev->name##_next = _item->name##_next; \
		else {                                                        \
			assert(*_head == _item);                              \
			*_head = _item->name##_next;                          \
		}                                                             \
		_item->name##_next = _item->name##_prev = NULL;               \
		_item;                                                        \
	})

/* The last object of the list that item is on (NULL for NULL). */
#define LIST_FIND_TAIL(name, item)                    \
	({                                            \
		typeof(item) _i = (item);             \
		if (_i)                               \
			while (_i->name##_next)       \
				_i = _i->name##_next; \
		_i;                                   \
	})

/* Every object from head on; the body may remove (and free) i. */
#define LIST_FOREACH(name, i, head)                                                  \
	for (typeof(*(head)) *i = (head), *_next_##i = i ? i->name##_next : NULL; i; \
	     i = _next_##i, _next_##i = i ? i->name##_next : NULL)

/* Every object from tail back to the first; the body may remove (and free) i. */
#define LIST_FOREACH_BACKWARDS(name, i, tail)                                        \
	for (typeof(*(tail)) *i = (tail), *_prev_##i = i ? i->name##_prev : NULL; i; \
	     i = _prev_##i, _prev_##i = i ? i->name##_prev : NULL)
