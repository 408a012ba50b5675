// ESLint for the tab's ES modules (make lint): undefined names, unused code and the mistakes that
// need no types. Browser globals are listed here (no plugin package: `npx eslint` alone runs it).
const browser = Object.fromEntries(
  [
    "window", "document", "navigator", "location", "history", "console", "performance", "fetch",
    "URL", "URLSearchParams", "Node", "HTMLElement", "Event", "CustomEvent", "MutationObserver",
    "ResizeObserver", "IntersectionObserver", "requestAnimationFrame", "cancelAnimationFrame",
    "setTimeout", "clearTimeout", "setInterval", "clearInterval", "getComputedStyle", "matchMedia",
    "atob", "btoa", "Blob", "structuredClone", "TextDecoder", "TextEncoder", "AbortController", "MessageChannel",
    "Uint8Array", "Uint16Array", "Float64Array", "Int32Array", "DataView", "ArrayBuffer", "Intl",
  ].map((name) => [name, "readonly"]),
);

export default [
  {
    files: ["static/**/*.js"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: browser },
    rules: {
      "no-undef": "error",
      "no-unused-vars": ["error", { args: "none", caughtErrors: "none" }],
      "no-dupe-keys": "error",
      "no-dupe-class-members": "error",
      "no-duplicate-imports": "error",
      "no-unreachable": "error",
      "no-self-assign": "error",
      "no-cond-assign": "error",
      "no-constant-condition": ["error", { checkLoops: false }],
      "no-redeclare": "error",
      "no-shadow-restricted-names": "error",
      "no-use-before-define": ["error", { functions: false, classes: false, variables: false }],
      eqeqeq: ["error", "smart"],
      "prefer-const": "error",
    },
  },
];
