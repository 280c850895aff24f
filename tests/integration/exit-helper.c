/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test_probe_exits.py's processes whose threads end in the ways the exit probe must not mistake
 * for the end of the process, and test_counters.py's process whose threads' exits cost. */
#include <errno.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static int status;

static void *park(void *arg) {
	for (;;)
		pause();
	return NULL;
}

/* A non-leader thread execs: de_thread() kills the leader and every other thread, and the
 * execing thread takes over the process id. The new image exits with `status`. */
static void *exec_from_thread(void *arg) {
	char code[16];

	snprintf(code, sizeof(code), "%d", status);
	execl("/proc/self/exe", "exit-helper", "exit", code, (char *) NULL);
	perror("execl");
	_exit(127);
}

enum { END_GROUP, END_THREAD, END_NEVER };

/* Waits until the leader has gone (a zombie while the group lives), then ends the process:
 * with exit() (exit_group), with a plain thread exit (the last thread's), or not at all (the
 * test kills it). */
static void *outlive_leader(void *arg) {
	int how = *(int *) arg;
	char path[64], buf[256];

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int) getpid());
	for (;;) {
		FILE *f = fopen(path, "re");
		char *p;

		if (!f)
			break;
		p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
		fclose(f);
		if (p && (p[2] == 'Z' || p[2] == 'X'))
			break;
		usleep(1000);
	}
	if (how == END_NEVER)
		park(NULL);
	if (how == END_THREAD)
		syscall(SYS_exit, status);
	exit(status);
}

static long teardown_fds;

/* A thread with a file table of its own, teardown_fds descriptors long: exit_files() closes
 * them all after the thread is marked exiting, CPU time of the process that the exit event's
 * counters must hold. */
static void *fd_table_thread(void *arg) {
	if (unshare(CLONE_FILES) < 0) {
		perror("unshare(CLONE_FILES)");
		_exit(4);
	}
	for (long i = 0; i < teardown_fds; i++)
		if (dup(0) < 0) {
			perror("dup");
			_exit(4);
		}
	return NULL;
}

/* The threads in /proc/self/task: a thread's entry goes when it is released, after its exit
 * (pthread_join() returns before the teardown, at the clear of its tid in exit_mm()). */
static int n_tasks(void) {
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* `threads-teardown N FDS`: N threads one after the other, each closing FDS descriptors at
 * its exit; the process exits once the last is gone, its own teardown small. */
static int threads_teardown(int n, long fds) {
	struct rlimit rl;
	pthread_t t;

	/* FDS may go up to the hard limit (the test's choice); the soft one is often lower. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void) setrlimit(RLIMIT_NOFILE, &rl);
	}
	teardown_fds = fds;
	for (int i = 0; i < n; i++) {
		if (pthread_create(&t, NULL, fd_table_thread, NULL) != 0 || pthread_join(t, NULL) != 0)
			return 3;
		while (n_tasks() > 1)
			usleep(1000);
	}
	return 0;
}

int main(int argc, char *argv[]) {
	pthread_t t;
	static int how;

	if (argc == 4 && strcmp(argv[1], "threads-teardown") == 0)
		return threads_teardown(atoi(argv[2]), atol(argv[3]));
	if (argc != 3) {
		fprintf(stderr,
			"usage: exit-helper exit|dethread|leader-exit|leader-exit-thread|leader-exit-park STATUS\n"
			"       exit-helper threads-teardown THREADS FDS\n");
		return 2;
	}
	status = atoi(argv[2]);
	if (strcmp(argv[1], "exit") == 0)
		return status;
	if (strcmp(argv[1], "dethread") == 0) {
		/* A second bystander thread, so that de_thread() has more than the leader to kill. */
		if (pthread_create(&t, NULL, park, NULL) != 0 ||
		    pthread_create(&t, NULL, exec_from_thread, NULL) != 0)
			return 3;
		park(NULL);
	}
	if (strncmp(argv[1], "leader-exit", strlen("leader-exit")) == 0) {
		how = strcmp(argv[1], "leader-exit-thread") == 0 ? END_THREAD :
			strcmp(argv[1], "leader-exit-park") == 0 ? END_NEVER :
								   END_GROUP;
		if (pthread_create(&t, NULL, outlive_leader, &how) != 0)
			return 3;
		pthread_exit(NULL);
	}
	fprintf(stderr, "unknown mode %s\n", argv[1]);
	return 2;
}
