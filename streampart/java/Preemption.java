package streampart.sqlserver;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.Pool;
import org.apache.spark.scheduler.Schedulable;
import org.apache.spark.scheduler.SchedulingMode;
import org.apache.spark.scheduler.TaskInfo;
import org.apache.spark.scheduler.TaskSchedulerImpl;
import org.apache.spark.scheduler.TaskSetManager;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Takes a slot back for a statement that waits while other statements' long tasks hold them all.
 *
 * <p>Each token's statements run in a FAIR scheduler pool of their own ({@link #poolFor}), and
 * Spark gives a free slot to the pool, then the stage, with the fewest running tasks. But Spark
 * never stops a running task to free one: one statement whose tasks each run for minutes (a cross
 * join of two ranges) would hold every slot until its timeout. So, every {@link #TICK_MS}, this
 * looks for a stage of a client's statement that has had tasks waiting and none running for
 * {@link #WAIT_MS} while every slot is busy; then the stage running the most tasks (at least two)
 * gives up its longest-running one. Spark runs a killed task again later (a kill is no failure),
 * and the freed slot goes to the waiting stage. No stage is ever brought down to no running task
 * by this, so statements that all run long share the slots instead of restarting each other's
 * tasks for ever; and a statement alone on the server is never touched.
 */
final class Preemption implements Runnable {
    /** Why 500 ms: a waiting statement is noticed quickly, and one look costs microseconds. */
    static final long TICK_MS = 500;

    /**
     * Why 1.5 s: the tasks of a short statement (a dashboard's) finish within a second or two and
     * free their slots anyway, so only tasks running longer are ever restarted; and a statement of
     * a few stages, each waiting this long at most, still answers within seconds.
     */
    static final long WAIT_MS = 1500;

    /** The prefix of the pools of clients' statements: other pools are the server's own work. */
    static final String POOLS = "token:";

    private static final org.apache.logging.log4j.Logger LOG =
        org.apache.logging.log4j.LogManager.getLogger(Preemption.class);

    private final SparkContext context;
    private final Map<TaskSetManager, Long> waitingSince = new java.util.IdentityHashMap<>();

    private Preemption(SparkContext context) {
        this.context = context;
    }

    /** Start the watch over {@code context}'s scheduler (a daemon thread); once per server. */
    static void start(SparkContext context) {
        Thread thread = new Thread(new Preemption(context), "streampart-preemption");
        thread.setDaemon(true);
        thread.start();
    }

    /**
     * The scheduler pool of {@code user}'s statements, made on first use: FAIR between its own
     * statements too (a pool Spark makes by itself runs its jobs one after another).
     */
    static String poolFor(SparkContext context, String user) {
        String name = POOLS + user;
        if (context.taskScheduler() instanceof TaskSchedulerImpl scheduler) {
            synchronized (scheduler) {
                Pool root = scheduler.rootPool();
                if (root.getSchedulableByName(name) == null) {
                    root.addSchedulable(new Pool(name, SchedulingMode.FAIR(), 0, 1));
                }
            }
        }
        return name;
    }

    @Override
    public void run() {
        while (!context.isStopped()) {
            try {
                Thread.sleep(TICK_MS);
                tick(System.currentTimeMillis());
            } catch (InterruptedException e) {
                return;
            } catch (RuntimeException e) {
                // the scheduler's state changed under the look: look again at the next tick
            }
        }
    }

    private void tick(long now) {
        if (!(context.taskScheduler() instanceof TaskSchedulerImpl scheduler)) {
            return;
        }
        long victim = -1;
        TaskSetManager starving = null;
        synchronized (scheduler) { // the scheduler changes its pools and task sets under this lock
            List<TaskSetManager> stages = new ArrayList<>();
            Set<TaskSetManager> clients = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
            int busy = 0;
            for (Schedulable s : scheduler.rootPool().schedulableQueue()) {
                if (s instanceof Pool pool) {
                    for (Schedulable t : pool.schedulableQueue()) {
                        if (t instanceof TaskSetManager m && !m.isZombie()) {
                            stages.add(m);
                            busy += m.runningTasks();
                            if (pool.poolName().startsWith(POOLS)) {
                                clients.add(m);
                            }
                        }
                    }
                }
            }
            for (TaskSetManager m : stages) {
                int waiting = m.numTasks() - m.tasksSuccessful() - m.runningTasks();
                if (clients.contains(m) && waiting > 0 && m.runningTasks() == 0) {
                    long since = waitingSince.computeIfAbsent(m, k -> now);
                    if (now - since >= WAIT_MS && starving == null) {
                        starving = m;
                    }
                } else {
                    waitingSince.remove(m);
                }
            }
            waitingSince.keySet().retainAll(new java.util.HashSet<>(stages));
            if (starving == null || busy < context.defaultParallelism()) { // a free slot: nothing to take
                return;
            }
            TaskSetManager most = null;
            for (TaskSetManager m : stages) {
                if (m != starving && m.runningTasks() >= 2 && (most == null || m.runningTasks() > most.runningTasks())) {
                    most = m;
                }
            }
            if (most == null) {
                return;
            }
            long oldest = Long.MAX_VALUE;
            for (Object id : CollectionConverters.asJava(most.runningTasksSet())) {
                scala.Option<TaskInfo> found = most.taskInfos().get(id);
                TaskInfo info = found.isDefined() ? found.get() : null;
                if (info != null && info.running() && info.launchTime() < oldest && now - info.launchTime() >= WAIT_MS) {
                    oldest = info.launchTime();
                    victim = info.taskId();
                }
            }
        }
        if (victim >= 0) {
            LOG.info("task {} stopped, to be run again later: a stage of pool {} waited {} ms behind it",
                victim, starving.parent() == null ? "?" : starving.parent().name(), WAIT_MS);
            context.killTaskAttempt(victim, true, "preempted: another statement was waiting");
            waitingSince.put(starving, now); // give the freed slot time to be taken before the next kill
        }
    }
}
