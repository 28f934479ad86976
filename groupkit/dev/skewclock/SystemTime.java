package org.apache.kafka.common.utils;

import java.util.function.Supplier;

import org.apache.kafka.common.errors.TimeoutException;

/**
 * groupkit's dev cluster: a broker whose wall clock is off.
 *
 * <p>Kafka reads wall-clock time through {@link Time#SYSTEM}, which kafka-clients builds from a
 * class of this name. Compiled and put before kafka-clients on a broker's class path, this one
 * replaces it: {@link #milliseconds()} is the machine's clock plus
 * {@code -Dgroupkit.clock.offset.ms}, so the broker stamps LogAppendTime, expires sessions and
 * times its requests as a broker with a skewed clock would. The monotonic clock
 * ({@link #nanoseconds()}) is left alone, as a skewed wall clock leaves it.
 *
 * <p>libfaketime (LD_PRELOAD) shifts every clock of the JVM instead, and made the broker start
 * in minutes on a 2-core machine (a lock on every clock read); this costs nothing.
 */
class SystemTime implements Time {
    private static final long OFFSET_MS = Long.getLong("groupkit.clock.offset.ms", 0L);
    private static final SystemTime SYSTEM_TIME = new SystemTime();

    public static SystemTime getSystemTime() {
        return SYSTEM_TIME;
    }

    private SystemTime() {
    }

    @Override
    public long milliseconds() {
        return System.currentTimeMillis() + OFFSET_MS;
    }

    @Override
    public long nanoseconds() {
        return System.nanoTime();
    }

    @Override
    public void sleep(long ms) {
        Utils.sleep(ms);
    }

    @Override
    public void waitObject(Object obj, Supplier<Boolean> condition, long deadlineMs)
            throws InterruptedException {
        synchronized (obj) {
            while (!condition.get()) {
                long left = deadlineMs - milliseconds();
                if (left <= 0) {
                    throw new TimeoutException("Condition not satisfied before deadline");
                }
                obj.wait(left);
            }
        }
    }
}
