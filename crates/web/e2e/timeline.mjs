// Opens the troupe web panel on one finished Team in the system's headless Chromium, moves the
// timeline slider with the keyboard as a person would (Home: the first Team event; End: live;
// then to the middle stop) and reports what the roster, the board and the message receipts
// show at each stop, as one JSON line:
//   {"stops": N, "live": Seen, "first": Seen, "middle": Seen, "problems": [...]}
// where Seen = {"atSeq", "label", "members": [name…], "tasks": [[id, status]…],
// "receipts": [[id, stage]…]}.
// Saves SCREENSHOT (the middle stop, laptop size). Env: PANEL_URL, SESSION_ID, SCREENSHOT,
// CHROMIUM (default /usr/bin/chromium). Exit 1 on a problem.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const url = process.env.PANEL_URL;
const session = process.env.SESSION_ID;
const screenshot = process.env.SCREENSHOT;
const profile = mkdtempSync(join(tmpdir(), "troupe-e2e-"));
const report = { problems: [] };
let browser;

const seen = (page) => page.evaluate(() => ({
  atSeq: document.getElementById("team").dataset.atSeq || null,
  label: document.getElementById("timeline-label").textContent,
  members: [...document.querySelectorAll(".member")].map((m) => m.dataset.member),
  tasks: [...document.querySelectorAll(".task")].map((t) => [t.dataset.taskId, t.dataset.status]),
  receipts: [...document.querySelectorAll(".receipt")].map((r) => [r.dataset.message, r.dataset.stage]),
}));

try {
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 860 },
  });
  const page = browser.pages()[0] ?? (await browser.newPage());
  page.on("console", (message) => {
    if (message.type() === "error") report.problems.push(`console error: ${message.text()}`);
  });
  page.on("pageerror", (error) => report.problems.push(`page error: ${error.message}`));
  await page.goto(`${url}#${session}`);
  // Live, with the timeline and the receipts read.
  await page.waitForSelector(".task", { timeout: 20000 });
  await page.waitForSelector("#timeline-slider:not([disabled])", { timeout: 20000 });
  await page.waitForSelector(".receipt", { timeout: 20000 });
  report.stops = Number(await page.getAttribute("#timeline-slider", "max"));
  report.live = await seen(page);

  const slider = page.locator("#timeline-slider");
  await slider.focus();
  await page.keyboard.press("Home");
  await page.waitForSelector('#team[data-past="true"]:not([data-at-seq=""])', { timeout: 20000 });
  report.first = await seen(page);

  await page.keyboard.press("End");
  await page.waitForSelector('#team[data-past="false"][data-at-seq=""]', { timeout: 20000 });
  const back = await seen(page);
  if (JSON.stringify(back.members) !== JSON.stringify(report.live.members)) {
    report.problems.push(`End did not bring the live roster back: ${JSON.stringify(back)}`);
  }

  await page.keyboard.press("Home");
  const middle = Math.floor(report.stops / 2);
  for (let i = 0; i < middle; i += 1) await page.keyboard.press("ArrowRight");
  await page.waitForFunction((want) => {
    const team = document.getElementById("team");
    const slider = document.getElementById("timeline-slider");
    return team.dataset.past === "true" && slider.value === String(want) && team.dataset.atSeq !== "";
  }, middle, { timeout: 20000 });
  // The view of the last request (the one for this stop) has been drawn.
  await page.waitForFunction(() => {
    const label = document.getElementById("timeline-label").textContent;
    const seq = (label.match(/seq (\d+)/) || [])[1];
    return seq !== undefined && document.getElementById("team").dataset.atSeq === seq;
  }, null, { timeout: 20000 });
  report.middle = await seen(page);
  await page.screenshot({ path: screenshot, fullPage: true });
  const error = await page.evaluate(() => {
    const banner = document.getElementById("error");
    return banner && !banner.hidden ? banner.textContent : null;
  });
  if (error) report.problems.push(`the panel shows an error: ${error}`);
} catch (error) {
  report.problems.push(`driver error: ${error.message}`);
} finally {
  if (browser) await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(report));
process.exit(report.problems.length ? 1 : 0);
