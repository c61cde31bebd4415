"""tools/criteo_synth.py, the synthetic Criteo-shaped click data: run as
a command at --scale=0.001 (tables of 1 to 10,131 ids) into a temporary
directory, its files read back with numpy. Checks the arrays' shapes,
types and ranges, byte-identical reruns, --global_ids, the click rate,
that the ids are Zipf-distributed (and the sampler exact), the Bayes-
optimal AUC in meta.json, that a logistic regression learns something
from the features, and the refusals of bad flags (exit 2, a message).
Needs numpy only; exits 77 (skipped) without it."""

import json
import math
import os
import subprocess
import sys
import tempfile
import time
import unittest

SKIP = 77
try:
    import numpy as np
except ImportError:
    print("SKIP: no numpy for %s (Debian: apt-get install python3-numpy)" % sys.executable)
    sys.exit(SKIP)

SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TOOL = os.path.join(SOURCE_DIR, "tools", "criteo_synth.py")
sys.path.insert(0, os.path.dirname(TOOL))
import criteo_synth as cs  # noqa: E402  pylint: disable=wrong-import-position

SCALE = 0.001
TRAIN, TEST = 20000, 5000
SEED = 7
FLAGS = ["--scale=%g" % SCALE, "--train=%d" % TRAIN, "--test=%d" % TEST]


def tool(*args):
    return subprocess.run([sys.executable, TOOL] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def load(directory, split):
    with np.load(os.path.join(directory, split + ".npz")) as z:
        return {k: z[k] for k in z.files}


def read(path):
    with open(path, "rb") as f:
        return f.read()


class CriteoSynth(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="criteo_synth_")
        cls.dirs = {}
        for name, extra in [("a", ["--seed=%d" % SEED]), ("again", ["--seed=%d" % SEED]),
                            ("other_seed", ["--seed=%d" % (SEED + 1)]),
                            ("global", ["--seed=%d" % SEED, "--global_ids"])]:
            out = os.path.join(cls._tmp.name, name)
            start = time.monotonic()
            done = tool("--out", out, *(FLAGS + extra))
            if done.returncode != 0:
                raise AssertionError("criteo_synth.py %s: exit %d\n%s%s" % (
                    " ".join(FLAGS + extra), done.returncode, done.stdout, done.stderr))
            print("%s: %s (%.1f s)" % (name, " ".join(FLAGS + extra), time.monotonic() - start))
            if name == "a":
                print(done.stdout.rstrip())
            cls.dirs[name] = out
        with open(os.path.join(cls.dirs["a"], "meta.json")) as f:
            cls.meta = json.load(f)
        cls.train = load(cls.dirs["a"], "train")
        cls.test = load(cls.dirs["a"], "test")

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_arrays_have_criteos_shape(self):
        cards = np.array(cs.cardinalities(SCALE))
        self.assertEqual(self.meta["cardinalities"], cards.tolist())
        self.assertEqual(cards.tolist()[:4], [1, 1, 10131, 2203])
        for split, n in [(self.train, TRAIN), (self.test, TEST)]:
            self.assertEqual(sorted(split), ["dense", "label", "p", "sparse"])
            self.assertEqual((split["dense"].shape, split["dense"].dtype), ((n, 13), np.float32))
            self.assertEqual((split["sparse"].shape, split["sparse"].dtype), ((n, 26), np.int64))
            self.assertEqual((split["label"].shape, split["label"].dtype), ((n,), np.float32))
            self.assertEqual((split["p"].shape, split["p"].dtype), ((n,), np.float32))
            dense = split["dense"]
            self.assertTrue(np.all(dense >= 0) and np.all(dense == np.floor(dense)))
            self.assertGreater(dense.max(), 1000, "heavy-tailed counts")
            missing = (dense == 0).mean(axis=0)
            self.assertGreater(missing[11], 0.6, "I12 is mostly missing, as in Criteo")
            self.assertTrue(set(np.unique(split["label"]).tolist()) <= {0.0, 1.0})
            self.assertTrue(np.all((split["p"] > 0) & (split["p"] < 1)))
            sparse = split["sparse"]
            self.assertTrue(np.all(sparse >= 0))
            self.assertTrue(np.all(sparse < cards), "an id beyond its field's cardinality")
        used = [len(np.unique(self.train["sparse"][:, f])) for f in range(26)]
        print("ids seen per field in train: %s" % used)
        self.assertEqual(used[2], len(np.unique(self.train["sparse"][:, 2])))
        self.assertGreater(used[2], 2000)

    def test_the_command_writes_what_generate_returns(self):
        model = cs.Model(SEED, SCALE)
        self.assertEqual(model.bias, self.meta["model"]["bias"])
        for split, stream, n in [(self.train, cs.TRAIN_STREAM, TRAIN),
                                 (self.test, cs.TEST_STREAM, TEST)]:
            got = cs.generate(n, SEED, stream, SCALE, model=model)
            for k in split:
                self.assertTrue(np.array_equal(got[k], split[k]), k)
        # The first n samples of a stream do not depend on how many are asked for.
        head = cs.generate(1000, SEED, cs.TRAIN_STREAM, SCALE, model=model)
        for k in head:
            self.assertTrue(np.array_equal(head[k], self.train[k][:1000]), k)

    def test_reruns_are_byte_identical_and_seeds_differ(self):
        for name in ("train.npz", "test.npz", "meta.json"):
            a = read(os.path.join(self.dirs["a"], name))
            self.assertEqual(a, read(os.path.join(self.dirs["again"], name)), name)
            self.assertNotEqual(a, read(os.path.join(self.dirs["other_seed"], name)), name)
        other = load(self.dirs["other_seed"], "train")
        self.assertFalse(np.array_equal(other["sparse"], self.train["sparse"]))
        self.assertFalse(np.array_equal(other["label"], self.train["label"]))
        self.assertEqual(sorted(os.listdir(self.dirs["again"])),
                         ["meta.json", "test.npz", "train.npz"], "temporary files left behind")

    def test_global_ids_offset_each_field_and_change_nothing_else(self):
        with open(os.path.join(self.dirs["global"], "meta.json")) as f:
            meta = json.load(f)
        cards = np.array(meta["cardinalities"])
        offsets = np.concatenate([[0], np.cumsum(cards)[:-1]])
        self.assertEqual(meta["id_offsets"], offsets.tolist())
        self.assertIsNone(self.meta["id_offsets"])
        g = load(self.dirs["global"], "train")
        self.assertTrue(np.array_equal(g["sparse"], self.train["sparse"] + offsets))
        self.assertTrue(np.all((g["sparse"] >= offsets) & (g["sparse"] < offsets + cards)))
        for k in ("dense", "label", "p"):
            self.assertTrue(np.array_equal(g[k], self.train[k]), k)
        self.assertEqual(meta["bayes_auc_test"], self.meta["bayes_auc_test"])

    def test_click_rate_is_the_target(self):
        ctr = self.meta["ctr"]
        self.assertEqual(ctr, 0.256)
        train, test = self.train["label"].mean(), self.test["label"].mean()
        print("click rate: train %.4f, test %.4f, target %.3f" % (train, test, ctr))
        self.assertAlmostEqual(self.meta["train_click_rate"], train, places=6)
        self.assertAlmostEqual(self.meta["test_click_rate"], test, places=6)
        self.assertLess(abs(train - ctr), 0.02)
        self.assertLess(abs(test - ctr), 0.02)
        self.assertLess(abs(self.train["p"].mean() - ctr), 0.01)

    def test_ids_are_zipf_distributed(self):
        zipf = self.meta["zipf"]
        self.assertEqual(zipf, 1.05)
        for field in (2, 3, 11):  # C3, C4, C12: 10131, 2203 and 8352 ids
            counts = np.bincount(self.train["sparse"][:, field])
            top = np.sort(counts)[::-1]
            median = np.median(counts[counts > 0])
            ranks = np.arange(1, 31)
            slope = np.polyfit(np.log(ranks), np.log(top[:30]), 1)[0]
            print("C%d: top id %d times, median of seen ids %g, log-log slope of the top 30 "
                  "ranks %.3f (zipf %.2f)" % (field + 1, top[0], median, slope, zipf))
            self.assertGreater(top[0], 100 * median)
            self.assertLess(abs(slope + zipf), 0.25)
            # Popular ids are spread over the range, not 0, 1, 2, ...
            popular = np.argsort(counts)[::-1][:10]
            self.assertNotEqual(sorted(popular.tolist()), list(range(10)))

    def test_the_zipf_sampler_is_exact(self):
        rng = np.random.default_rng(5)
        for n, a in [(30, 0.5), (30, 1.0), (30, 1.05), (30, 2.5), (1, 1.05), (3, 1.05)]:
            draws = 200000
            counts = np.bincount(cs.zipf_ranks(rng, n, a, draws), minlength=n)
            self.assertEqual(len(counts), n)
            expected = cs.zipf_pmf(n, a) * draws
            ok = expected > 5
            chi2 = float((((counts - expected) ** 2 / expected)[ok]).sum())
            df = max(1, int(ok.sum()) - 1)
            print("zipf n=%d a=%g: chi-square %.1f on %d degrees of freedom" % (n, a, chi2, df))
            # Far beyond the 1e-6 quantile of chi-square(df) for df <= 29.
            self.assertLess(chi2, 3 * df + 40)
        ranks = cs.zipf_ranks(rng, 10131227, 1.05, 100000)
        self.assertTrue(ranks.min() >= 0 and ranks.max() < 10131227)
        self.assertAlmostEqual((ranks == 0).mean(), cs.zipf_pmf(10131227, 1.05)[0], delta=0.005)

    def test_auc_handles_ties(self):
        rng = np.random.default_rng(3)
        labels = rng.random(300) < 0.3
        scores = rng.integers(0, 7, 300).astype(np.float64)  # many ties
        pos, neg = scores[labels], scores[~labels]
        pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
        self.assertAlmostEqual(cs.auc(labels, scores), pairs / (len(pos) * len(neg)), places=12)
        self.assertEqual(cs.auc([0, 1], [0.2, 0.9]), 1.0)
        self.assertEqual(cs.auc([0, 1, 0, 1], [0.5, 0.5, 0.5, 0.5]), 0.5)
        with self.assertRaises(ValueError):
            cs.auc([1, 1], [0.1, 0.2])

    def test_bayes_auc_is_the_auc_of_p(self):
        bayes = self.meta["bayes_auc_test"]
        again = cs.auc(self.test["label"], self.test["p"])
        print("Bayes-optimal AUC on test: meta.json %.6f, recomputed %.6f" % (bayes, again))
        self.assertTrue(0.6 < bayes < 0.95, bayes)
        self.assertAlmostEqual(bayes, again, places=12)

    def test_a_logistic_regression_learns_from_the_features(self):
        # One-hot ids (every field's ids offset into one table) and the
        # standardised log1p of the counts, Adagrad on minibatches, numpy.
        cards = np.array(self.meta["cardinalities"])
        offsets = np.concatenate([[0], np.cumsum(cards)[:-1]])
        mean = np.log1p(self.train["dense"]).mean(axis=0)
        std = np.log1p(self.train["dense"]).std(axis=0) + 1e-6

        def features(split):
            return split["sparse"] + offsets, (np.log1p(split["dense"]) - mean) / std

        ids, dense = features(self.train)
        y = self.train["label"].astype(np.float64)
        w, beta, bias = np.zeros(int(cards.sum())), np.zeros(13), 0.0
        gw, gbeta, gbias = np.full_like(w, 1e-8), np.full(13, 1e-8), 1e-8
        lr, l2, batch = 0.1, 1e-4, 256
        rng = np.random.default_rng(0)
        start = time.monotonic()
        for _ in range(3):
            for b in np.array_split(rng.permutation(TRAIN), TRAIN // batch):
                z = bias + w[ids[b]].sum(axis=1) + dense[b] @ beta
                r = 1.0 / (1.0 + np.exp(-z)) - y[b]
                g = np.bincount(ids[b].ravel(), weights=np.repeat(r, 26), minlength=w.size) / len(b)
                g += l2 * w
                gw += g * g
                w -= lr * g / np.sqrt(gw)
                g = dense[b].T @ r / len(b)
                gbeta += g * g
                beta -= lr * g / np.sqrt(gbeta)
                g = r.mean()
                gbias += g * g
                bias -= lr * g / math.sqrt(gbias)
        ids, dense = features(self.test)
        learnt = cs.auc(self.test["label"], bias + w[ids].sum(axis=1) + dense @ beta)
        print("logistic regression (3 epochs, %.1f s): test AUC %.4f; Bayes-optimal %.4f"
              % (time.monotonic() - start, learnt, self.meta["bayes_auc_test"]))
        self.assertGreater(learnt, 0.55)
        self.assertLess(learnt, self.meta["bayes_auc_test"] + 0.01)

    def test_bad_flags_exit_2_with_a_message(self):
        not_a_dir = os.path.join(self.dirs["a"], "meta.json", "out")
        for args, says in [(["--train=-1"], "--train"), (["--test=-5"], "--test"),
                           (["--scale=0"], "--scale"), (["--scale=-2"], "--scale"),
                           (["--scale=nan"], "--scale"), (["--scale=1e12"], "--scale"),
                           (["--zipf=0"], "--zipf"), (["--zipf=-1"], "--zipf"),
                           (["--ctr=0"], "--ctr"), (["--ctr=1.5"], "--ctr"),
                           (["--seed=-1"], "--seed"), (["--train=many"], "--train"),
                           (["--out", not_a_dir], "--out")]:
            argv = args if "--out" in args else ["--out", os.path.join(self._tmp.name, "x")] + args
            done = tool(*argv)
            print("%s: exit %d, %s" % (" ".join(args), done.returncode,
                                      done.stderr.strip().splitlines()[-1:]))
            self.assertEqual(done.returncode, 2, args)
            self.assertIn(says, done.stderr)
            self.assertNotIn("Traceback", done.stderr)
            self.assertFalse(os.path.exists(os.path.join(self._tmp.name, "x")))
        done = tool("--scale=0.001")
        self.assertEqual(done.returncode, 2)
        self.assertIn("--out", done.stderr)
        # An exponent of 1 or less is a proper distribution over a finite support.
        out = os.path.join(self._tmp.name, "flat")
        done = tool("--out", out, "--scale=0.001", "--zipf=0.8", "--train=100", "--test=100")
        self.assertEqual(done.returncode, 0, done.stderr)

    def test_help_explains_every_flag(self):
        done = tool("--help")
        self.assertEqual(done.returncode, 0)
        for flag in ("--out", "--train", "--test", "--seed", "--scale", "--zipf", "--ctr",
                     "--global_ids"):
            self.assertIn(flag, done.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
