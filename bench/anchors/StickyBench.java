// Times Apache Kafka's own StickyAssignor / CooperativeStickyAssignor on the shapes of
// bench/assignors.py, so groupkit's numbers have an anchor measured in the same run.
//
// Run as a single source file (Java 11+), with the kafka-clients jars on the class path:
//
//   java -cp "$HOME/.cache/groupkit/bench-jars/*" bench/anchors/StickyBench.java \
//        sticky large-equal 5 2
//
// Arguments: assignor (sticky | cooperative-sticky), shape, timed runs, warm-up runs.
// Prints one JSON object per phase on stdout:
//   {"assignor": ..., "shape": ..., "phase": ..., "times": [seconds...], "partitions": P,
//    "members": N, "moved": M}
// The shapes must stay identical to SHAPES in bench/assignors.py.

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor;
import org.apache.kafka.common.TopicPartition;

public class StickyBench {

    /** Topics with their partition counts, and each member's topics. */
    record Shape(Map<String, Integer> partitions, Map<String, List<String>> members) {}

    static String topic(int i) {
        return String.format("topic%03d", i);
    }

    static String member(int i) {
        return String.format("member%04d", i);
    }

    static Shape equal(int topics, int parts, int members) {
        Map<String, Integer> p = new TreeMap<>();
        for (int t = 0; t < topics; t++) p.put(topic(t), parts);
        List<String> all = new ArrayList<>(p.keySet());
        Map<String, List<String>> m = new TreeMap<>();
        for (int i = 0; i < members; i++) m.put(member(i), all);
        return new Shape(p, m);
    }

    /** Equal subscriptions plus one member subscribed only to the first topic. */
    static Shape plusOne(int topics, int parts, int members) {
        Shape s = equal(topics, parts, members);
        s.members().put(member(members), List.of(topic(0)));
        return s;
    }

    /** librdkafka's large group: topic i has i+1 partitions, member i the first ((i+1)*17 mod 40). */
    static Shape librdkafka(int members, int topics) {
        Map<String, Integer> p = new TreeMap<>();
        for (int t = 0; t < topics; t++) p.put(topic(t), t + 1);
        Map<String, List<String>> m = new TreeMap<>();
        for (int i = 0; i < members; i++) {
            int n = ((i + 1) * 17) % topics;
            List<String> ts = new ArrayList<>();
            for (int t = 0; t < n; t++) ts.add(topic(t));
            m.put(member(i), ts);
        }
        return new Shape(p, m);
    }

    static Shape shape(String name) {
        return switch (name) {
            case "large-equal" -> equal(500, 2000, 2000);
            case "unequal-40k" -> plusOne(50, 800, 800);
            case "librdkafka" -> librdkafka(200, 40);
            case "quick-equal" -> equal(50, 200, 200);
            case "quick-unequal" -> plusOne(10, 80, 80);
            default -> throw new IllegalArgumentException("unknown shape " + name);
        };
    }

    static AbstractStickyAssignor newAssignor(String name) {
        return switch (name) {
            case "sticky" -> new StickyAssignor();
            case "cooperative-sticky" -> new CooperativeStickyAssignor();
            default -> throw new IllegalArgumentException("unknown assignor " + name);
        };
    }

    /**
     * Subscriptions as a member would send them after owning {@code owned} in {@code generation}.
     * StickyAssignor reads its previous assignment from user data only, so the user data is made
     * the way a member makes it: by an assignor instance that was told its assignment.
     */
    static Map<String, Subscription> subscriptions(
            String assignorName,
            Map<String, List<String>> members,
            Map<String, List<TopicPartition>> owned,
            int generation) {
        Map<String, Subscription> out = new HashMap<>();
        for (var e : members.entrySet()) {
            List<TopicPartition> mine = owned.getOrDefault(e.getKey(), List.of());
            ByteBuffer userData = null;
            if (owned.containsKey(e.getKey())) {
                AbstractStickyAssignor a = newAssignor(assignorName);
                a.onAssignment(
                        new Assignment(mine),
                        new ConsumerGroupMetadata("bench", generation, e.getKey(), Optional.empty()));
                userData = a.subscriptionUserData(new HashSet<>(e.getValue()));
            }
            out.put(
                    e.getKey(),
                    new Subscription(e.getValue(), userData, mine, generation, Optional.empty()));
        }
        return out;
    }

    static void phase(
            String assignorName,
            String shapeName,
            String phaseName,
            Map<String, Integer> partitions,
            Map<String, Subscription> subs,
            int runs,
            int warmups,
            Map<String, List<TopicPartition>> before,
            Map<String, List<TopicPartition>>[] result) {
        List<Double> times = new ArrayList<>();
        Map<String, List<TopicPartition>> last = null;
        for (int r = 0; r < warmups + runs; r++) {
            AbstractStickyAssignor a = newAssignor(assignorName);
            // Reading user data advances the buffer, so every run gets fresh views of it.
            Map<String, Subscription> input = new HashMap<>();
            for (var e : subs.entrySet()) {
                Subscription s = e.getValue();
                ByteBuffer u = s.userData() == null ? null : s.userData().duplicate();
                input.put(
                        e.getKey(),
                        new Subscription(
                                s.topics(), u, s.ownedPartitions(),
                                s.generationId().orElse(-1), Optional.empty()));
            }
            long t0 = System.nanoTime();
            last = a.assign(partitions, input);
            long t1 = System.nanoTime();
            if (r >= warmups) times.add((t1 - t0) / 1e9);
        }
        result[0] = last;
        long total = partitions.values().stream().mapToLong(Integer::longValue).sum();
        int moved = 0;
        Map<TopicPartition, String> prev = new HashMap<>();
        for (var e : before.entrySet()) for (TopicPartition tp : e.getValue()) prev.put(tp, e.getKey());
        for (var e : last.entrySet())
            for (TopicPartition tp : e.getValue()) {
                String o = prev.get(tp);
                if (o != null && subs.containsKey(o) && !o.equals(e.getKey())) moved++;
            }
        StringBuilder sb = new StringBuilder();
        sb.append("{\"assignor\": \"").append(assignorName).append("\", \"shape\": \"")
                .append(shapeName).append("\", \"phase\": \"").append(phaseName)
                .append("\", \"partitions\": ").append(total).append(", \"members\": ")
                .append(subs.size()).append(", \"moved\": ").append(moved).append(", \"times\": [");
        for (int i = 0; i < times.size(); i++) sb.append(i > 0 ? ", " : "").append(times.get(i));
        sb.append("]}");
        System.out.println(sb);
        System.out.flush();
    }

    @SuppressWarnings("unchecked")
    public static void main(String[] args) {
        String assignorName = args[0];
        String shapeName = args[1];
        int runs = Integer.parseInt(args[2]);
        int warmups = Integer.parseInt(args[3]);
        Shape s = shape(shapeName);
        Map<String, List<TopicPartition>>[] out = new Map[1];

        Map<String, Subscription> fresh = subscriptions(assignorName, s.members(), Map.of(), -1);
        phase(assignorName, shapeName, "fresh", s.partitions(), fresh, runs, warmups, Map.of(), out);
        Map<String, List<TopicPartition>> first = out[0];

        // The follow-up rebalance of each shape, with every remaining member owning what the
        // fresh assignment gave it (generation 1).
        Map<String, List<String>> next = new TreeMap<>(s.members());
        String phaseName;
        if (shapeName.equals("librdkafka")) {
            phaseName = "every-4th-leaves";
            int i = 0;
            for (String m : s.members().keySet()) {
                if (i++ % 4 == 0) next.remove(m);
            }
        } else {
            phaseName = "one-joins";
            next.put("member9999", new ArrayList<>(s.partitions().keySet()));
        }
        Map<String, List<TopicPartition>> owned = new HashMap<>();
        for (String m : next.keySet()) if (first.containsKey(m)) owned.put(m, first.get(m));
        Map<String, Subscription> subs = subscriptions(assignorName, next, owned, 1);
        phase(assignorName, shapeName, phaseName, s.partitions(), subs, runs, warmups, first, out);
    }
}
