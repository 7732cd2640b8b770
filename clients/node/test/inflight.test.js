'use strict';
// In-flight limits (acquire / release) and costs known after the response (reserve / settle), on
// both paths, against a real server's clock.

const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const { setTimeout: sleep } = require('node:timers/promises');
const { SlidingWindow } = require('..');
const { pathServer, newKey } = require('./server');

for (const path of ['module', 'lua']) {
  describe(`${path} path: in flight and settled`, () => {
    let server, c, sw;
    before(async () => {
      ({ server, c } = await pathServer(path));
      sw = new SlidingWindow(c);
    });
    after(() => server.close());
    const held = async (key) => (await sw.peek(key, [3600, 1_000_000])).count - 1;

    test('N+1 concurrent holders see exactly one refusal; releases give every slot back', async () => {
      const key = newKey();
      const slots = await Promise.all(Array.from({ length: 6 }, () => sw.acquire(key, 5, 60)));
      assert.deepEqual(slots.map((s) => s.allowed).sort(), [false, true, true, true, true, true]);
      assert.equal(await held(key), 5);
      const released = await Promise.all(slots.map((s) => s.release()));
      assert.deepEqual(released.sort(), [false, true, true, true, true, true]);
      assert.equal(await held(key), 0);
      assert.equal(await slots[0].release(), false);
    });

    test('never more than N in flight, counted from the upstream side', async () => {
      const key = newKey();
      let inside = 0;
      let most = 0;
      let refused = 0;
      const worker = async () => {
        for (let i = 0; i < 15; i++) {
          const slot = await sw.acquire(key, 3, 60);
          if (!slot.allowed) {
            refused++;
            continue;
          }
          inside++;
          most = Math.max(most, inside);
          await sleep(2);
          inside--;
          await slot.release();
        }
      };
      await Promise.all(Array.from({ length: 8 }, worker));
      assert.ok(most >= 1 && most <= 3, `most in flight: ${most}`);
      assert.ok(refused > 0);
      assert.equal(await held(key), 0);
    });

    test("a dead holder's slot comes back when the hold passes", async () => {
      const key = newKey();
      const dead = await sw.acquire(key, 1, 1);
      assert.ok(dead.allowed);
      assert.equal((await sw.acquire(key, 1, 1)).allowed, false);
      const deadline = Date.now() + 10_000;
      for (;;) {
        const slot = await sw.acquire(key, 1, 1);
        if (slot.allowed) {
          await slot.release();
          break;
        }
        assert.ok(Date.now() < deadline, 'the slot never came back');
        await sleep(50);
      }
      // Its late release takes nothing: the acquire after the hold trimmed its member.
      assert.equal(await dead.release(), false);
    });

    test('reserve, then settle or cancel', async () => {
      const key = newKey();
      const limits = [60, 100];
      let r = await sw.reserve(key, limits, 10);
      assert.ok(r.allowed);
      assert.deepEqual(await r.settle(3), { refunded: 7, charged: 0, overrun: 0 });
      assert.equal(await held(key), 3);
      await assert.rejects(r.settle(3), /already settled/);
      r = await sw.reserve(key, limits, 10);
      assert.deepEqual(await r.settle(15), { refunded: 0, charged: 5, overrun: 0 });
      assert.equal(await held(key), 18);
      r = await sw.reserve(key, limits, 70);
      assert.deepEqual(await r.settle(90), { refunded: 0, charged: 0, overrun: 20 });
      assert.equal(await held(key), 88);
      r = await sw.reserve(key, [60, 1000], 50);
      assert.equal(await r.cancel(), 50);
      assert.equal(await held(key), 88);
      const refused = await sw.reserve(key, limits, 20);
      assert.equal(refused.allowed, false);
      await assert.rejects(refused.settle(0), /refused/);
      await assert.rejects((await sw.reserve(key, [60, 1000], 1)).settle(-1), TypeError);
    });
  });
}
