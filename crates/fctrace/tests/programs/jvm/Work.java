// A Java program for fctrace's tests (jvm.rs): threads, exceptions whose
// stack traces are taken, the garbage collector, and calls into the JDK's
// native libraries (files, zip, time). It prints "ready", then runs one
// round per "run" line on stdin (printing "round N"), and at "quit" (or
// the end of its input) prints its total. With an argument N it runs N
// rounds without reading stdin.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.CRC32;

public class Work {
    static int depth(int n) {
        if (n == 0) {
            throw new IllegalStateException("bottom");
        }
        return depth(n - 1) + 1;
    }

    static long round(int r) throws Exception {
        long total = 0;
        List<Thread> threads = new ArrayList<>();
        long[] results = new long[4];
        for (int t = 0; t < 4; t++) {
            final int k = t;
            Thread th = new Thread(() -> {
                long sum = 0;
                for (int i = 0; i < 2000; i++) {
                    sum += Integer.toString(i * (k + 1)).hashCode() & 0xff;
                }
                try {
                    depth(200 + k);
                } catch (IllegalStateException e) {
                    sum += e.getStackTrace().length;
                }
                results[k] = sum;
            });
            threads.add(th);
            th.start();
        }
        for (Thread th : threads) {
            th.join();
        }
        for (long v : results) {
            total += v;
        }
        System.gc();
        Path f = Files.createTempFile("fctrace-jvm", ".txt");
        Files.writeString(f, "round " + r);
        CRC32 crc = new CRC32();
        crc.update(Files.readAllBytes(f));
        Files.delete(f);
        total += crc.getValue() & 0xffff;
        return total;
    }

    public static void main(String[] args) throws Exception {
        long total = 0;
        if (args.length > 0) {
            int n = Integer.parseInt(args[0]);
            for (int r = 0; r < n; r++) {
                total += round(r);
            }
        } else {
            System.out.println("ready");
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            String line;
            int r = 0;
            while ((line = in.readLine()) != null && line.equals("run")) {
                total += round(r);
                r++;
                System.out.println("round " + r);
                System.out.flush();
            }
        }
        System.out.println("total " + total);
    }
}
